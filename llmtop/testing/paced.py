"""An in-process engine with exact, scripted timings that change from request to request, for
tests and benchmarks of the bench's slow-episode finder and re-measuring (issue 25).

Not a server: it has the `Engine` protocol's streaming surface and answers every prompt
with a generated reply whose timeline is known exactly. Its stamps are virtual: each request
starts `STEP_NS` after the previous on the engine's own clock (`clock`, a `perf_counter_ns`
stand-in), and each event is stamped at its offset from that start. A test that patches
`llmtop.sessions.measure.request.perf_counter_ns` with `clock` gets TTFT, E2E and decode
figures exactly as written here, whatever the machine's load.

Timeline of a reply with n output tokens and slowdown factor f (ms after its send):
load `load_ms`, prefill `prefill_ms_per_token` per prompt token, then `overhead_ms`, then
the first token, then one token every `gap_ms`; every duration × f. The server's statistics
say the same: prompt_eval_count = TEMPLATE_TOKENS + the prompt's words (so calibration
converges), eval_count = n, eval_duration = n × gap_ms × f.

`factor(j)` gives f for the j-th *decoding* request (num_predict ≥ 3, from 0: a bench's
warm-ups first, then its measured requests); calibration probes and the bench's first
short request (num_predict ≤ 2) are never slowed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from llmtop.engines.base import ModelInfo
from llmtop.engines.connection import Connection
from llmtop.engines.events import ServerStats, StreamEvent

MS = 1_000_000
START_NS = 10**12
STEP_NS = 10**10  # each reply starts 10 s (virtual) after the previous one
TEMPLATE_TOKENS = 19  # the chat template's cost: prompt_eval_count = 19 + words


@dataclass(frozen=True)
class Pace:
    """An unslowed reply's timeline, ms (module docstring)."""

    load_ms: float = 2.0
    prefill_ms_per_token: float = 0.5
    overhead_ms: float = 5.0
    gap_ms: float = 10.0


class VirtualClock:
    """A `perf_counter_ns` stand-in that returns `now`, which the engine moves."""

    def __init__(self) -> None:
        self.now = START_NS

    def __call__(self) -> int:
        return self.now


def episodes(*spans: tuple[int, int], slower: float, warmup: int = 1) -> Callable[[int], float]:
    """A `factor` that slows measured requests first…last (1-based, inclusive, as the bench
    numbers them after `warmup` warm-ups) by `slower` (1.3: every duration 30 % longer).
    Raises ValueError for a span that is empty or starts before request 1."""
    for first, last in spans:
        if first < 1 or last < first:
            raise ValueError(
                f"an episode spans requests first…last with 1 ≤ first ≤ last, not {first}…{last}"
            )

    def factor(j: int) -> float:
        number = j - warmup + 1
        return slower if any(a <= number <= b for a, b in spans) else 1.0

    return factor


def trend(per_request: float, warmup: int = 1) -> Callable[[int], float]:
    """A `factor` that grows by `per_request` per measured request (0.01: +1 % each,
    compounding), 1.0 for the warm-ups."""
    return lambda j: (1.0 + per_request) ** max(0, j - warmup)


class PacedEngine:
    """The streaming surface of an engine with scripted timings (module docstring)."""

    name = "paced"
    host = "http://paced:1"

    def __init__(
        self, pace: Pace | None = None, factor: Callable[[int], float] | None = None
    ) -> None:
        self.pace = pace or Pace()
        self.factor = factor or (lambda _j: 1.0)
        self.clock = VirtualClock()
        self.replies = 0
        self.decoding = 0

    def _reply(self, prompt: str, options: Mapping[str, Any]) -> list[StreamEvent]:
        p = self.pace
        self.replies += 1
        base = START_NS + self.replies * STEP_NS
        self.clock.now = base
        n_out = int(options.get("num_predict", 8))
        f = 1.0
        if n_out >= 3:
            f = self.factor(self.decoding)
            self.decoding += 1
        tokens = TEMPLATE_TOKENS + len(prompt.split())
        load, prefill, gap = p.load_ms * f, tokens * p.prefill_ms_per_token * f, p.gap_ms * f
        first = load + prefill + p.overhead_ms * f

        def at(ms: float, **kw: Any) -> StreamEvent:
            return StreamEvent(t_ns=base + round(ms * MS), **kw)

        events = [at(first + i * gap, content=f" w{i}") for i in range(n_out)]
        stats = ServerStats(
            total_duration=round((load + prefill + n_out * gap) * MS),
            load_duration=round(load * MS),
            prompt_eval_count=tokens,
            prompt_eval_duration=round(prefill * MS),
            eval_count=n_out,
            eval_duration=round(n_out * gap * MS),
            done_reason="length",
        )
        return [*events, at(first + (n_out - 1) * gap + 1.0, done=True, stats=stats)]

    def stream_chat(
        self,
        model: str,
        messages: list[Mapping[str, Any]],
        *,
        options: Mapping[str, Any] | None = None,
        think: bool | str | None = None,
        keep_alive: float | str | None = None,
    ) -> AsyncGenerator[StreamEvent, None]:
        """Replay a generated reply to the last message (module docstring); `think` and
        `keep_alive` change nothing."""
        events = self._reply(str(messages[-1]["content"]), options or {})

        async def gen() -> AsyncGenerator[StreamEvent, None]:
            for event in events:
                await asyncio.sleep(0)
                yield event

        return gen()

    async def version(self) -> str:
        """The engine's version string."""
        return "0.0.0-paced"

    async def list_models(self) -> list[str]:
        """The one model it serves."""
        return ["paced"]

    async def model_info(self, model: str) -> ModelInfo:
        """A small model's details."""
        return ModelInfo(name=model, parameter_size="1.0M", quantization="Q4_K_M")

    async def aclose(self) -> None:
        """Nothing to close."""


def paced_connection(engine: PacedEngine) -> Connection:
    """A real `Connection` around a `PacedEngine` (no child process, no engine pids)."""
    return Connection(
        engine=engine,
        model="paced",
        info=ModelInfo(name="paced", parameter_size="1.0M", quantization="Q4_K_M"),
        version="0.0.0-paced",
    )
