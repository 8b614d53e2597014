"""StreamFrames: a frame in the chunk's own pass of the event loop when one is due, a fallback
deadline when the stream stalls, never two frames queued at once. FrameClock: the render timer
paused while a request streams and once nothing is left to draw, resumed by a wake."""

from __future__ import annotations

import asyncio

from llmtop.tui.state.frames import FrameClock, StreamFrames

MS = 1_000_000


class Clock:
    """A perf_counter_ns the test sets (ns)."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


async def settle(frames: StreamFrames, drawn: list[bool], n: int) -> None:
    """Let the loop run until `n` frames were drawn (at most 2 s of real time)."""
    for _ in range(200):
        if len(drawn) >= n:
            return
        await asyncio.sleep(0.01)


async def test_due_frames_follow_chunks_and_stalls_fall_back() -> None:
    clock = Clock()
    drawn: list[bool] = []
    frames = StreamFrames(drawn.append, period_ns=50 * MS, stall_ns=20 * MS, clock=clock)
    clock.now = 1000 * MS
    frames.changed()  # nothing drawn yet: due at once, in this pass of the loop
    frames.changed()  # already queued: no second frame
    await asyncio.sleep(0)
    assert drawn == [False] and frames.last_ns == 1000 * MS
    clock.now += 10 * MS
    frames.changed()  # 10 ms after the last frame: not due; the deadline is set
    await asyncio.sleep(0)
    assert drawn == [False]
    clock.now += 45 * MS  # 55 ms after the last frame: the next chunk finds a frame due
    frames.changed()
    await asyncio.sleep(0)
    assert drawn == [False, False]  # and the deadline went with it
    clock.now += 1 * MS
    frames.changed()  # not due: a deadline at last + 50 + 20 ms (~69 ms of real time)
    await settle(frames, drawn, 3)
    assert drawn == [False, False, True]  # no chunk came: the stalled frame


async def test_urgent_is_drawn_at_once_and_cancel_drops_the_deadline() -> None:
    clock = Clock()
    drawn: list[bool] = []
    frames = StreamFrames(drawn.append, period_ns=50 * MS, stall_ns=10 * MS, clock=clock)
    clock.now = 1000 * MS
    frames.changed()
    await asyncio.sleep(0)
    frames.changed(urgent=True)  # the end, right after a frame: drawn at once anyway
    await asyncio.sleep(0)
    assert drawn == [False, False]
    frames.changed()  # not due: a deadline ~60 ms away
    frames.cancel()  # the request ended: the render timer takes over
    await asyncio.sleep(0.15)  # past the deadline: nothing (asserts no call, not a time)
    assert drawn == [False, False] and frames.frames == 2


class Timer:
    """A render timer that records what it was told (Textual's `Timer`: pause, resume)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause(self) -> None:
        self.calls.append("pause")

    def resume(self) -> None:
        self.calls.append("resume")


async def test_the_clock_pauses_the_timer_once_and_a_wake_resumes_it() -> None:
    drawn: list[bool] = []
    clock = FrameClock(drawn.append)
    timer = Timer()
    clock.hold()  # before the timer is handed over: nothing to pause
    clock.start(timer)
    clock.rest()  # nothing left to draw
    clock.rest()  # already paused: the timer is not told twice
    assert timer.calls == ["pause"] and clock.paused
    clock.wake(streaming=False, urgent=False)
    assert timer.calls == ["pause", "resume"] and not clock.paused
    clock.hold()  # a request streams: its frames follow the chunks
    clock.wake(streaming=True, urgent=True)  # the first chunk: a stream frame, no timer
    await asyncio.sleep(0)
    assert timer.calls == ["pause", "resume", "pause"] and drawn == [False]


def test_ticks_are_counted_and_a_stream_frame_aligns_them() -> None:
    clock = FrameClock(lambda _stalled: None)
    clock.advance()
    assert clock.ticks == 1 and not clock.due(2)
    clock.align(2)  # the next tick is a text tick
    clock.advance()
    assert clock.due(2)
    clock.align(2)  # already on one: the next multiple
    clock.advance()
    assert clock.ticks == 4 and clock.due(2)
