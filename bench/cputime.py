"""A process's CPU time to the nanosecond, for benchmarks that measure small costs.

psutil's `cpu_times()` comes from /proc/PID/stat in clock ticks (10 ms at USER_HZ 100): over
20 requests that is 0.5 ms of resolution per request, as coarse as the costs measured. The
scheduler's own count, `sum_exec_runtime`, is kept per thread in nanoseconds and is the first
field of /proc/PID/task/TID/schedstat (Linux's Documentation/scheduler/sched-stats.rst); its
third field counts the thread's timeslices, each one a time it was put on a CPU: a wake-up.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import psutil


class ThreadStat(NamedTuple):
    """One thread at one moment: its name, run time (ns), timeslices (each a time it was put on
    a CPU) and voluntary context switches (each a time it went to sleep: a wake-up to come)."""

    name: str
    run_ns: int
    slices: int
    wakeups: int


def thread_stats(pid: int) -> dict[int, ThreadStat]:
    """Every thread of `pid` now, by thread id (those that end while being read are left out):
    schedstat's run time and timeslices, status's name and voluntary_ctxt_switches (Linux).
    Raises FileNotFoundError when the process is gone or there is no /proc (not Linux)."""
    out: dict[int, ThreadStat] = {}
    folder = f"/proc/{pid}/task"
    for tid in os.listdir(folder):
        try:
            with open(f"{folder}/{tid}/schedstat") as f:
                fields = f.read().split()
            with open(f"{folder}/{tid}/status") as f:
                status = dict(line.split(":\t", 1) for line in f.read().splitlines()
                              if ":\t" in line)
        except (FileNotFoundError, ProcessLookupError):  # the thread ended meanwhile
            continue
        out[int(tid)] = ThreadStat(status["Name"].strip(), int(fields[0]), int(fields[2]),
                                   int(status["voluntary_ctxt_switches"]))
    return out


class CpuMeter:
    """CPU time of process `pid` between `start()` and `stop()`, in ns. Precise (schedstat) when
    the same threads are alive at both ends, else psutil's tick count, and `precise` says so;
    `slices` is then the number of timeslices (wake-ups) in between, else None."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.precise = True
        self.slices: int | None = None
        self._threads: dict[int, ThreadStat] = {}
        self._ticks = 0.0

    def _psutil_s(self) -> float:
        t = psutil.Process(self.pid).cpu_times()
        return t.user + t.system

    def start(self) -> None:
        """Take the first reading."""
        self._ticks = self._psutil_s()
        try:
            self._threads = thread_stats(self.pid)
        except FileNotFoundError:
            self._threads = {}

    def stop(self) -> int:
        """CPU ns since `start()`, all threads together."""
        ticks_ns = round((self._psutil_s() - self._ticks) * 1e9)
        try:
            now = thread_stats(self.pid)
        except FileNotFoundError:
            now = {}
        self.precise = bool(now) and now.keys() == self._threads.keys()
        if not self.precise:
            self.slices = None
            return ticks_ns
        self.slices = sum(now[t].slices - self._threads[t].slices for t in now)
        return sum(now[t].run_ns - self._threads[t].run_ns for t in now)
