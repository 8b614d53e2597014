"""The process probe's reading thread: one that stays, fed one read at a time, with a limit.

Reading the process table runs off the sampling thread because a read can block for good (a
process stuck in the kernel blocks a read of its /proc/<pid>/cmdline): the caller waits at
most a given time, then gives the thread up. Starting a thread for every sample cost ~0.2 ms
of CPU and a wake-up (bench/probe_cost.py); this thread is started once and handed each read
through a queue. What the reads keep between samples (the open stat files,
`procstat.StatFiles`) belongs to the thread: a thread given up on takes it along and closes
it when it wakes up, so nothing it touches is shared with its successor.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

_thread_ns: Callable[[], int] = getattr(time, "thread_time_ns", time.process_time_ns)


class Closable(Protocol):
    """What a worker's state must offer: `close()`, called once the thread ends."""

    def close(self) -> None: ...


Read = Callable[[Any, list[int]], Any]
"""A job: read(state, current) → result; `current[0]` names the pid being read."""


class ReadWorker:
    """A daemon thread that runs `Read` jobs one at a time on its own `state`.

    current: `[pid]` the running job is reading (0 when none), for a timeout's message.
    cpu_ns: the thread's CPU time (ns) in its last finished job (the sample's cost).
    """

    def __init__(self, state: Closable, name: str = "llmtop-proc-read") -> None:
        self.state = state
        self.current = [0]
        self.cpu_ns = 0
        self._jobs: queue.SimpleQueue[tuple[Read, list[Any], threading.Event] | None] = (
            queue.SimpleQueue()
        )
        self._retired = False
        threading.Thread(target=self._loop, name=name, daemon=True).start()

    def run(self, read: Read, timeout_s: float) -> tuple[bool, Any]:
        """Run `read` in the thread and wait up to `timeout_s` seconds: (True, its result), or
        (False, None) when it is still running (then `retire` this worker). Re-raises what
        `read` raised."""
        done = threading.Event()
        box: list[Any] = []
        self._jobs.put((read, box, done))
        if not done.wait(timeout_s):
            return False, None
        if isinstance(box[0], BaseException):
            raise box[0]
        return True, box[0]

    def retire(self) -> None:
        """End the thread after its current job (at once when idle); it then closes its
        state. Safe to call more than once."""
        self._retired = True
        self._jobs.put(None)

    def _loop(self) -> None:
        try:
            while not self._retired:
                job = self._jobs.get()
                if job is None:
                    break
                read, box, done = job
                c0 = _thread_ns()
                try:
                    box.append(read(self.state, self.current))
                except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                    box.append(exc)
                self.cpu_ns = _thread_ns() - c0
                self.current[0] = 0
                done.set()
                del job, read, box, done  # hold no caller's objects while waiting
        finally:
            self.state.close()
