"""While a request streams, frames follow its chunks instead of a timer of their own.

On a 2-core VM every wake-up of the event loop costs ~0.2 ms of CPU by itself (a bare loop
that sleeps 10–20 ms and writes a line: 213–248 µs per iteration, against 5 µs without the
sleep), and py-spy put half of the TUI main thread's CPU while streaming in the epoll wait
(bench/tui_cost.py --py-spy). The loop wakes for every chunk anyway (50 a second at 50 tok/s);
a render timer at 8 Hz added 8 wake-ups a second of its own. `StreamFrames` draws in the wake-up
of the chunk that finds a frame due (`period_ns` since the last, or something urgent: the first
chunk, the end), and keeps one fallback deadline `stall_ns` after the due time, for a stream
that stalls with something still to draw; a frame cancels it. `FrameClock` puts them beside
the main screen's render timer, which draws the rest and is paused when nothing is left.
Pure asyncio: no Textual here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

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


class Pausable(Protocol):
    """A timer that can be paused and resumed (Textual's `Timer`)."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...


class FrameClock:
    """When the main screen draws. While no request streams, a render timer draws what is
    dirty, and is paused once nothing is left (`rest`): an idle screen spends nothing on
    ticks until `wake`. While one streams, the timer is paused too (`hold`) and frames follow
    the stream's chunks (`stream`, a `StreamFrames` calling `stream_frame(stalled)`). Ticks
    are counted (`advance`), so that text and numbers are drawn every n-th (`due`); a stream
    frame first `align`s the count so that its tick is one of those.

    stream_frame: the screen's frame while a request streams; `start` hands over the render
    timer once the screen has made it (until then, pausing and resuming do nothing).
    """

    def __init__(self, stream_frame: Callable[[bool], None]) -> None:
        self.stream = StreamFrames(stream_frame)
        self.ticks = 0  # frames drawn by the timer or the stream
        self.paused = False  # idle with everything drawn: no ticks until `wake`
        self._timer: Pausable | None = None
        self._ticking = True  # the timer runs (a new Textual timer starts running)

    def start(self, timer: Pausable) -> None:
        """The render timer, running."""
        self._timer = timer

    def advance(self) -> None:
        """One more tick (a frame is being drawn)."""
        self.ticks += 1

    def due(self, every: int) -> bool:
        """True on every `every`-th tick."""
        return self.ticks % every == 0

    def align(self, every: int) -> None:
        """Set the count so that the next tick (`advance`) is a multiple of `every`."""
        self.ticks = (self.ticks // every + 1) * every - 1

    def wake(self, streaming: bool, urgent: bool) -> None:
        """Something changed that is to be drawn: while a request is `streaming`, the stream's
        frames draw it (at once when `urgent`: the first chunk, the end); otherwise the timer
        resumes (a paused Textual timer ticks at once)."""
        self.paused = False
        if streaming:
            self.stream.changed(urgent)
        else:
            self.stream.cancel()
            self._run(True)

    def hold(self) -> None:
        """A request streams: its frames follow its chunks, the timer waits."""
        self._run(False)

    def rest(self) -> None:
        """Nothing is left to draw: no ticks until `wake`."""
        self._run(False)
        self.paused = True

    def _run(self, on: bool) -> None:
        """Resume (`on`) or pause the render timer, when it is not so already."""
        if self._timer is not None and self._ticking != on:
            self._ticking = on
            if on:
                self._timer.resume()
            else:
                self._timer.pause()


__all__ = ["FRAME_PERIOD_NS", "STALL_NS", "FrameClock", "Pausable", "StreamFrames"]
