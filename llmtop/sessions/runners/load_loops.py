"""How a level's requests leave in `llmtop load` (load.py's `LoadRunner` runs them).

Closed loop: N workers, each sends its next request when its last one ended, until the
batch's count or time is up. Open loop: requests leave on a seeded timetable
(load_config.py's `arrival_offsets`) whatever is in flight, each timed from its *scheduled*
send too, so a generator that falls behind cannot hide queueing (coordinated omission, Gil
Tene, "How NOT to Measure Latency"). Both send through the runner's `Send` (it streams,
classifies and logs a request); neither knows the runner itself. The open loop's timer
(TIMER_EARLY_NS) is the one docs/performance.md ("Send lag, llmtop's own part") measured.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from time import perf_counter_ns, sleep
from typing import Any, Protocol

from llmtop.sessions.runners.load_config import arrival_offsets

# asyncio's epoll selector rounds a timer's timeout up to whole milliseconds
# (selectors.EpollSelector.select: math.ceil(timeout * 1e3)), so a send timed by
# asyncio.sleep alone leaves 0–1 ms late; an open loop wakes this much early and sleeps the
# rest (under 1 ms) in the loop's own thread, where nanosleep keeps ~0.1 ms.
TIMER_EARLY_NS = 1_000_000


class Send(Protocol):
    """Stream and log one request: its prompt, its log fields (with its "index"), t0 (the
    batch's start, perf_counter_ns) and, open loop, its scheduled send (perf_counter_ns)."""

    def __call__(self, prompt: str, fields: dict[str, Any], *, t0: int | None = None,
                 scheduled_ns: int | None = None) -> Coroutine[Any, Any, None]: ...


async def closed_loop(
    send: Send,
    workers: int,
    limit: int | None,
    t0: int,
    duration_s: float | None,
    fields: dict[str, Any],
    make_prompt: Callable[[], str],
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
    make_prompt: Callable[[], str],
    first: int,
    seed: int,
    stopped: Callable[[], bool],
) -> None:
    """Send request first + k at t0 + offset_k (`arrival_offsets(rate, total, arrivals,
    seed)`, seconds) whatever is in flight; each runs in its own task, and none leaves once
    stopped() (over-saturated). Cancelled, it cancels the requests in flight (each logged as
    "cancelled")."""
    offsets = arrival_offsets(rate, total, arrivals, seed)
    tasks = []
    try:
        for k, offset in enumerate(offsets):
            scheduled = t0 + round(offset * 1e9)
            prompt = make_prompt()  # before the wait: off the send path (0.1 ms at 150 words)
            wait_ns = scheduled - perf_counter_ns()
            if wait_ns > TIMER_EARLY_NS:
                await asyncio.sleep((wait_ns - TIMER_EARLY_NS) / 1e9)
            rest_ns = scheduled - perf_counter_ns()
            if rest_ns > 0:  # < 1 ms; replies meanwhile keep their kernel receive stamps
                sleep(rest_ns / 1e9)  # noqa: ASYNC251 (elsewhere: read ≤ 1 ms later)
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
