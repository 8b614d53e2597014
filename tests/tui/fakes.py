"""A scripted engine with the `Connection` shape, and pilot helpers, for exact TUI tests.

Stamps are exact: tests patch `llmtop.sessions.request.perf_counter_ns` to return SENT_NS, and
the fake stamps each event SENT_NS + its offset, so TTFT/ITL/TPOT come out as written here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from textual.keys import _character_to_key
from textual.pilot import Pilot

from llmtop.engines.events import Failure, FailureKind, ServerStats, StreamEvent
from llmtop.engines.ollama import ModelInfo

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


class FakeEngine:
    """`OllamaEngine`'s streaming surface: plays SCRIPTS[prompt] (or `extra[prompt]`)."""

    name = "fake"
    host = "http://fake:1"

    def __init__(self, extra: Mapping[str, Sequence[StreamEvent | str]] | None = None) -> None:
        self.scripts = {**SCRIPTS, **(extra or {})}
        self.prompts: list[str] = []
        self.closed = False

    def stream_chat(
        self,
        model: str,
        messages: list[Mapping[str, Any]],
        *,
        options: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> AsyncIterator[StreamEvent]:
        prompt = str(messages[-1]["content"])
        steps = self.scripts[prompt]

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


@dataclass
class FakeConnection:
    """The parts of `launcher.Connection` the TUI and the recorder use."""

    engine: FakeEngine = field(default_factory=FakeEngine)
    model: str = "fake-model"
    info: ModelInfo | None = field(
        default_factory=lambda: ModelInfo(
            name="fake-model", parameter_size="1.0M", quantization="Q4_K_M"
        )
    )
    version: str | None = "9.9"
    closed: bool = False

    @property
    def engine_pids(self) -> set[int]:
        return set()

    async def close(self) -> None:
        await self.engine.aclose()
        self.closed = True


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
