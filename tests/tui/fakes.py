"""A scripted engine with the `Connection` shape, and pilot helpers, for exact TUI tests.

Stamps are exact: tests patch `llmtop.sessions.measure.request.perf_counter_ns` to return
SENT_NS, and the fake stamps each event SENT_NS + its offset, so TTFT/ITL/TPOT come out as
written here.

A prompt with no script gets a *generated* answer, for the bench and its calibration: the
server's `prompt_eval_count` is 19 + the message's whitespace-separated words (so calibration
converges exactly), `num_predict` tokens are produced, and each such request gets its own
virtual second: patch `perf_counter_ns` with the engine's `clock` so the send stamps follow.
Timeline of a generated request (ms after its send), with `Timing`:
load 2 → prefill 0.5 per prompt token → overhead 5 → first token → one token per `gap_ms`
(× (1 + growth × j), j = 0, 1, … over requests with num_predict ≥ 3) → done 1 ms later.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from textual.dom import DOMNode
from textual.keys import _character_to_key
from textual.pilot import Pilot
from textual.widgets import Static

from llmtop.engines.base import ModelInfo
from llmtop.engines.connection import Connection
from llmtop.engines.events import Failure, FailureKind, ServerStats, StreamEvent
from llmtop.probes.catalogue import Category
from llmtop.probes.processes import AppUsage, ProcessSample
from llmtop.probes.sampler import ProbeSample
from llmtop.probes.system import SystemSample
from llmtop.probes.verdict import Finding, Level, Verdict

SENT_NS = 10**12
MS = 1_000_000

HANG = "hang"  # a script step: wait forever (until cancelled)

OK_STATS = ServerStats(
    total_duration=200 * MS,
    load_duration=10 * MS,
    prompt_eval_count=20,
    prompt_eval_duration=100 * MS,
    eval_count=3,
    eval_duration=40 * MS,
    done_reason="stop",
)


def ev(ms: float, content: str = "", thinking: str = "", **kw: Any) -> StreamEvent:
    """An event stamped `ms` after the send."""
    return StreamEvent(t_ns=SENT_NS + int(ms * MS), content=content, thinking=thinking, **kw)


SCRIPTS: dict[str, list[StreamEvent | str]] = {
    # TTFT 123.4 ms; ITL 20, 20 ms; E2E 200 ms
    "hello": [
        ev(123.4, "Hello"),
        ev(143.4, " world"),
        ev(163.4, "!"),
        ev(200.0, done=True, stats=OK_STATS),
    ],
    "think": [
        ev(50.0, thinking="Let me think."),
        ev(60.0, content="Answer."),
        ev(70.0, done=True, stats=OK_STATS),
    ],
    "fail": [
        ev(30.0, "partial"),
        ev(
            40.0,
            done=True,
            failure=Failure(FailureKind.SERVER_ERROR, "the runner crashed", "restart the engine"),
        ),
    ],
    "slow": [ev(10.0, "first chunk"), HANG],
}


TEMPLATE_TOKENS = 19  # the generated answers' prompt_eval_count = 19 + words
GENERATED_STEP_NS = 10**10  # each generated request starts 10 s (virtual) after the previous


@dataclass
class Timing:
    """A generated request's timeline, ms (see the module docstring)."""

    load_ms: float = 2.0
    prefill_ms_per_token: float = 0.5
    overhead_ms: float = 5.0
    gap_ms: float = 10.0
    growth: float = 0.0  # gap × (1 + growth × j): > 0 makes decode slow down over the run


class VirtualClock:
    """A `perf_counter_ns` stand-in: returns `now`, which the fake engine moves."""

    def __init__(self) -> None:
        self.now = SENT_NS

    def __call__(self) -> int:
        return self.now


class FakeEngine:
    """`OllamaEngine`'s streaming surface: plays SCRIPTS[prompt] (or `extra[prompt]`), or a
    generated answer for any other prompt.

    on_start(j, send_ns): called as a generated request with num_predict ≥ 3 starts (j counts
    them from 0; send_ns is its virtual send stamp). hang_at: that j hangs after one token.
    """

    name = "fake"
    host = "http://fake:1"

    def __init__(
        self,
        extra: Mapping[str, Sequence[StreamEvent | str]] | None = None,
        timing: Timing | None = None,
        on_start: Callable[[int, int], None] | None = None,
        hang_at: int | None = None,
    ) -> None:
        self.scripts = {**SCRIPTS, **(extra or {})}
        self.prompts: list[str] = []
        self.closed = False
        self.timing = timing or Timing()
        self.on_start = on_start
        self.hang_at = hang_at
        self.clock = VirtualClock()
        self.generated = 0  # generated requests so far (calibration probes included)
        self.decoding = 0  # generated requests with num_predict >= 3 so far

    def _generate(self, prompt: str, options: Mapping[str, Any]) -> list[StreamEvent | str]:
        t = self.timing
        self.generated += 1
        base = SENT_NS + self.generated * GENERATED_STEP_NS
        self.clock.now = base
        n_out = int(options.get("num_predict", 8))
        gap = t.gap_ms
        hang = False
        if n_out >= 3:
            j = self.decoding
            self.decoding += 1
            gap *= 1 + t.growth * j
            hang = j == self.hang_at
            if self.on_start is not None:
                self.on_start(j, base)
        prompt_tokens = TEMPLATE_TOKENS + len(prompt.split())
        prefill = prompt_tokens * t.prefill_ms_per_token
        first = t.load_ms + prefill + t.overhead_ms

        def at(ms: float, **kw: Any) -> StreamEvent:
            return StreamEvent(t_ns=base + round(ms * MS), **kw)

        steps: list[StreamEvent | str] = [at(first, content=" w0")]
        if hang:
            return [*steps, HANG]
        steps += [at(first + i * gap, content=f" w{i}") for i in range(1, n_out)]
        end = first + (n_out - 1) * gap + 1.0
        # the server's own figures fit inside the client's clock (a figure past it is set
        # aside: sessions/measure/telemetry.py): its decode runs from the first token to the
        # last, n − 1 gaps (docs/method.md, "Server rates"), and its total ends with the last
        stats = ServerStats(
            total_duration=round((t.load_ms + prefill + (n_out - 1) * gap) * MS),
            load_duration=round(t.load_ms * MS),
            prompt_eval_count=prompt_tokens,
            prompt_eval_duration=round(prefill * MS),
            eval_count=n_out,
            eval_duration=round((n_out - 1) * gap * MS),
            done_reason="length",
        )
        return [*steps, at(end, done=True, stats=stats)]

    def stream_chat(
        self,
        model: str,
        messages: list[Mapping[str, Any]],
        *,
        options: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> AsyncIterator[StreamEvent]:
        prompt = str(messages[-1]["content"])
        if prompt in self.scripts:
            self.clock.now = SENT_NS
            steps = self.scripts[prompt]
        else:
            steps = self._generate(prompt, options or {})

        async def gen() -> AsyncIterator[StreamEvent]:
            self.prompts.append(prompt)
            for step in steps:
                await asyncio.sleep(0)
                if step == HANG:
                    await asyncio.Event().wait()
                assert isinstance(step, StreamEvent)
                yield step

        return gen()

    async def aclose(self) -> None:
        self.closed = True


def fake_connection(engine: FakeEngine | None = None) -> Connection:
    """A real `Connection` around a `FakeEngine` (no children, no engine pids)."""
    return Connection(
        engine=engine or FakeEngine(),
        model="fake-model",
        info=ModelInfo(name="fake-model", parameter_size="1.0M", quantization="Q4_K_M"),
        version="9.9",
    )


GIB = 1024**3
BROWSER_BUSY = "Chromium (14 processes) is using 38 % CPU"


def browser_busy() -> Finding:
    """The WARN finding of a busy browser (38 % CPU against a 10 % threshold)."""
    return Finding(
        "browser-busy",
        Level.WARN,
        38.0,
        10.0,
        "% CPU",
        BROWSER_BUSY,
        "close the browser or its busy tabs",
    )


def probe_sample(t_ns: int, noisy: str | None = None) -> ProbeSample:
    """A probe sample taken at `t_ns` (perf_counter_ns): NOISY with the finding `noisy`, else
    QUIET. Its system/process parts are absent (the panel says the probe failed)."""
    findings = []
    if noisy is not None:
        findings.append(Finding("browser-busy", Level.WARN, 38.0, 10.0, "% CPU", noisy, "close it"))
    return ProbeSample(
        t_ns=t_ns,
        wall_time="t",
        system=None,
        processes=None,
        gpu=None,
        verdict=Verdict.of(findings),
        cost_ms=1.0,
    )


def system_sample(cpu: float | None, per_cpu: tuple[float, ...] = ()) -> SystemSample:
    """A 16 GiB machine with 12 GiB available (25 %), 2 GiB of unused swap, load 0.5/core."""
    return SystemSample(
        cpu_percent=cpu,
        per_cpu=per_cpu,
        load_avg_per_core=0.5,
        mem_total=16 * GIB,
        mem_available=12 * GIB,
        mem_percent=25.0,
        swap_total=2 * GIB,
        swap_used=0,
        swap_percent=0.0,
        cpu_freq_mhz=None,
        cpu_freq_max_mhz=None,
        on_battery=None,
        logical_cpus=len(per_cpu) or 4,
    )


def app_usage(
    name: str, cpu: float | None, category: Category = Category.OTHER, n: int = 1
) -> AppUsage:
    """An app of `n` processes using `cpu` % of one core (None: warming up) and 1 GiB RSS."""
    return AppUsage(
        app=name,
        category=category,
        cpu_percent=cpu,
        rss_bytes=GIB,
        n_procs=n,
        pids=tuple(range(n)),
        is_browser=category is Category.BROWSER,
    )


def busy_apps() -> tuple[AppUsage, ...]:
    """Chromium's 14 processes at 38 %, llmtop itself, the engine, and slack warming up."""
    return (
        app_usage("Chromium", 38.0, Category.BROWSER, 14),
        app_usage("llmtop", 3.2, Category.SELF),
        app_usage("llama", 95.0, Category.ENGINE),
        app_usage("slack", None),
    )


def machine_sample(
    t_ns: int,
    cpu: float | None,
    apps: tuple[AppUsage, ...],
    verdict: Verdict,
    self_cpu: float | None,
) -> ProbeSample:
    """A complete sample with fixed figures (no psutil): `system_sample(cpu)` on 4 cores at
    10/90/0/50 %, these apps, the engine at 95 %, a probe cost of 2.5 ms."""
    procs = ProcessSample(
        apps=apps, self_cpu_percent=self_cpu, engine_cpu_percent=95.0, warming_up=self_cpu is None
    )
    return ProbeSample(
        t_ns=t_ns,
        wall_time="t",
        system=system_sample(cpu, (10.0, 90.0, 0.0, 50.0)),
        processes=procs,
        gpu=None,
        verdict=verdict,
        cost_ms=2.5,
    )


def shown(node: DOMNode, selector: str) -> str:
    """The text a Static under `node` shows (its content, as Textual renders it)."""
    return str(node.query_one(selector, Static).content)


async def wait_for(
    pilot: Pilot[Any], cond: Callable[[], bool], timeout_s: float = 10.0, what: str = ""
) -> None:
    """Poll `cond` every 0.05 s (letting the app run) until true; fail after `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what or cond}")
        await pilot.pause(0.05)


async def type_text(pilot: Pilot[Any], text: str) -> None:
    """Type `text` key by key into the focused widget."""
    await pilot.press(*(_character_to_key(c) for c in text))
