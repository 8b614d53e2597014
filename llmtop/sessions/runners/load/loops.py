"""How a level's requests leave in `llmtop load` (runner.py's `LoadRunner` runs them).

Closed loop: N workers, each sends its next request when its last one ended, until the
batch's count or time is up. Open loop: requests leave on a seeded timetable
(runners/load/config.py's `arrival_offsets`) whatever is in flight, each timed from its *scheduled*
send too, so a generator that falls behind cannot hide queueing (coordinated omission, Gil
Tene, "How NOT to Measure Latency"). Both send through the runner's `Send` (it streams,
classifies and logs a request); neither knows the runner itself.

An open loop starts each request's task LEAD_NS before its scheduled send, and the send itself
is held until the scheduled moment (the runner opens `stamps.released_at(scheduled)`, and the
stamping stream's first write waits for it: `stamps.hold`), so building the request and
taking a pooled connection happen before the schedule, not in its lag (docs/performance.md,
"Send lag").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any, Protocol

from llmtop.sessions.runners.load.config import arrival_offsets

# How early an open loop's request starts: its work before the socket (the ollama or openai
# client's and httpx's request building, the pool) takes 0.4–1.0 ms median on a quiet 2-core
# machine (`client_prep_ms`, bench/clock_truth.py); 5 ms leaves room for a loop busy with other
# requests, and a task started that early holds nothing but its pooled connection longer. A
# request whose preparation runs past it leaves late, and its lag says so.
LEAD_NS = 5_000_000


@dataclass(frozen=True)
class Prepared:
    """A request from a file (a `--dataset` record, a replayed watch request): the prompt
    (the last user message), the chat before it, its own options over the run's, and the
    fields its record gets (its `dataset_line` or `replay_of`)."""

    prompt: str
    history: Sequence[Mapping[str, Any]] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    fields: Mapping[str, Any] = field(default_factory=dict)


Prompt = str | Prepared  # llmtop's own calibrated prompt, or a request from a file


class Send(Protocol):
    """Stream and log one request: its prompt, its log fields (with its "index"), t0 (the
    batch's start, perf_counter_ns) and, open loop, its scheduled send (perf_counter_ns)."""

    def __call__(self, prompt: Prompt, fields: dict[str, Any], *, t0: int | None = None,
                 scheduled_ns: int | None = None) -> Coroutine[Any, Any, None]: ...


async def closed_loop(
    send: Send,
    workers: int,
    limit: int | None,
    t0: int,
    duration_s: float | None,
    fields: dict[str, Any],
    make_prompt: Callable[[], Prompt],
    numbers: list[int],
) -> None:
    """N workers; each takes the next index `numbers[0]` until `limit` are taken (or, by
    duration, until the batch's time, `duration_s` from t0, is up) and sends its next request
    when its last one ended."""
    deadline = t0 + round((duration_s or 0) * 1e9)

    async def worker() -> None:
        while True:
            if limit is None and perf_counter_ns() >= deadline:
                return
            k = numbers[0]
            if limit is not None and k >= limit:
                return
            numbers[0] += 1
            await send(make_prompt(), {**fields, "index": k}, t0=t0)

    await asyncio.gather(*(worker() for _ in range(workers)))


async def open_loop(
    send: Send,
    rate: float,
    total: int,
    t0: int,
    arrivals: str,
    fields: dict[str, Any],
    make_prompt: Callable[[], Prompt],
    first: int,
    seed: int,
    stopped: Callable[[], bool],
    offsets: Sequence[float] | None = None,
    lead_ns: int = LEAD_NS,
) -> None:
    """Send request first + k at t0 + offset_k (`arrival_offsets(rate, total, arrivals,
    seed)`, seconds, or the given `offsets`: a replayed trace's) whatever is in flight; each
    runs in its own task, started `lead_ns` before (`send` holds it to `scheduled_ns`), and none
    starts once stopped() (over-saturated). Cancelled, it cancels the requests in flight
    (each logged as "cancelled")."""
    if offsets is None:
        offsets = arrival_offsets(rate, total, arrivals, seed)
    tasks = []
    try:
        for k, offset in enumerate(offsets):
            scheduled = t0 + round(offset * 1e9)
            prompt = make_prompt()  # before the wait: off the send path (0.1 ms at 150 words)
            wait_ns = scheduled - lead_ns - perf_counter_ns()
            if wait_ns > 0:  # asyncio's timer is enough here: the send is held to the ns
                await asyncio.sleep(wait_ns / 1e9)
            if stopped():  # over-saturated: nothing more leaves
                break
            tasks.append(asyncio.create_task(send(
                prompt, {**fields, "index": first + k}, t0=t0, scheduled_ns=scheduled,
            )))
        await asyncio.gather(*tasks)
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
