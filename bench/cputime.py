"""A process's CPU time to the nanosecond, for benchmarks that measure small costs.

psutil's `cpu_times()` comes from /proc/PID/stat in clock ticks (10 ms at USER_HZ 100): over
20 requests that is 0.5 ms of resolution per request, as coarse as the costs measured. The
scheduler's own count, `sum_exec_runtime`, is kept per thread in nanoseconds and is the first
field of /proc/PID/task/TID/schedstat (Linux's Documentation/scheduler/sched-stats.rst); its
third field counts the thread's timeslices, each one a time it was put on a CPU: a wake-up.
"""

from __future__ import annotations

import os

import psutil


def threads_cpu_ns(pid: int) -> dict[int, tuple[int, int]]:
    """{thread id: (CPU ns it has run, timeslices)} for every live thread of `pid` (Linux).
    Raises FileNotFoundError when the process is gone or /proc has no schedstat (not Linux)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as fh:
                fields = fh.read().split()
                out[int(tid)] = (int(fields[0]), int(fields[2]))
        except FileNotFoundError:  # the thread ended between the listing and the read
            continue
    return out


class CpuMeter:
    """CPU time of process `pid` between `start()` and `stop()`, in ns. Precise (schedstat) when
    the same threads are alive at both ends, else psutil's tick count, and `precise` says so;
    `slices` is then the number of timeslices (wake-ups) in between, else None."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.precise = True
        self.slices: int | None = None
        self._threads: dict[int, tuple[int, int]] = {}
        self._ticks = 0.0

    def _psutil_s(self) -> float:
        t = psutil.Process(self.pid).cpu_times()
        return t.user + t.system

    def start(self) -> None:
        """Take the first reading."""
        self._ticks = self._psutil_s()
        try:
            self._threads = threads_cpu_ns(self.pid)
        except FileNotFoundError:
            self._threads = {}

    def stop(self) -> int:
        """CPU ns since `start()`, all threads together."""
        ticks_ns = round((self._psutil_s() - self._ticks) * 1e9)
        try:
            now = threads_cpu_ns(self.pid)
        except FileNotFoundError:
            now = {}
        self.precise = bool(now) and now.keys() == self._threads.keys()
        if not self.precise:
            self.slices = None
            return ticks_ns
        self.slices = sum(now[t][1] - self._threads[t][1] for t in now)
        return sum(now[t][0] - self._threads[t][0] for t in now)
