"""While a request streams, frames follow its chunks instead of a timer of their own.

On a 2-core VM every wake-up of the event loop costs ~0.2 ms of CPU by itself (a bare loop
that sleeps 10–20 ms and writes a line: 213–248 µs per iteration, against 5 µs without the
sleep), and py-spy put half of the TUI main thread's CPU while streaming in the epoll wait
(bench/tui_cost.py --py-spy). The loop wakes for every chunk anyway (50 a second at 50 tok/s);
a render timer at 8 Hz added 8 wake-ups a second of its own. `StreamFrames` draws in the wake-up
of the chunk that finds a frame due (`period_ns` since the last, or something urgent: the first
chunk, the end), and keeps one fallback deadline `stall_ns` after the due time, for a stream
that stalls with something still to draw; a frame cancels it. Pure asyncio: no Textual here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

FRAME_PERIOD_NS = 500_000_000  # text and numbers twice a second: each frame a second costs
# ~0.5 % of a core on 2 cores (bench/tui_cost.py: 7.0 % at 4 frames/s, 6.0 % at 2.2)
STALL_NS = 100_000_000  # no chunk this long after a frame was due: draw anyway


class StreamFrames:
    """Calls `draw(stalled)` when a frame is due, in the same pass of the event loop as the
    chunk (`stalled` False), or at the fallback deadline (`stalled` True: no chunk came, so
    draw everything that waits).

    draw: renders what is dirty (the app's frame); period_ns: the least time between frames
    (ns); stall_ns: how long after the due time the fallback deadline draws when no chunk
    came; clock: perf_counter_ns (tests pass their own). Must be used from the event loop's
    thread (it schedules with `call_soon` / `call_later`).
    """

    def __init__(
        self,
        draw: Callable[[bool], None],
        period_ns: int = FRAME_PERIOD_NS,
        stall_ns: int = STALL_NS,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self._draw = draw
        self.period_ns = period_ns
        self.stall_ns = stall_ns
        self._clock = clock
        self.last_ns = -period_ns  # when the last frame was drawn
        self._soon = False  # a frame is queued with call_soon
        self._deadline: asyncio.TimerHandle | None = None
        self.frames = 0

    def changed(self, urgent: bool = False) -> None:
        """Something to draw arrived (a chunk, a probe sample): draw in this pass of the loop
        when a frame is due or `urgent`; else make sure the fallback deadline is set."""
        if self._soon:
            return
        now = self._clock()
        loop = asyncio.get_running_loop()
        if urgent or now - self.last_ns >= self.period_ns:
            self._soon = True
            loop.call_soon(self._frame, False)
        elif self._deadline is None:
            wait_ns = self.last_ns + self.period_ns + self.stall_ns - now
            self._deadline = loop.call_later(wait_ns / 1e9, self._frame, True)

    def _frame(self, stalled: bool) -> None:
        self._soon = False
        self.cancel()
        self.last_ns = self._clock()
        self.frames += 1
        self._draw(stalled)

    def cancel(self) -> None:
        """Drop the fallback deadline (the request ended: the render timer takes over)."""
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None


__all__ = ["FRAME_PERIOD_NS", "STALL_NS", "StreamFrames"]
