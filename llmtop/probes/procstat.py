"""One read of /proc/<pid>/stat per process per sample (Linux): the process probe's fast path.

psutil reads a process's files several times per sample (a fresh `Process` for `is_running`,
`stat` for CPU times, `statm` for memory); `/proc/<pid>/stat` alone has everything that
changes between samples — the command name, the parent, user+system CPU ticks, the start time
(which, with the pid, identifies a process: a recycled pid has another start time) and the
resident set in pages (the same counter as `statm`'s second field). Field numbers below are
proc(5)'s, counted from 1. bench/probe_cost.py measures the difference (about 4× cheaper).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

PROC_ROOT = "/proc"
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True, slots=True)
class StatLine:
    """The fields of one `/proc/<pid>/stat` read that the probe uses.

    comm: the kernel's command name (at most 15 characters; changes on exec).
    state: one letter ("R", "S", "Z" for a zombie...). ppid: the parent's pid.
    cpu_ticks: user + system CPU time in clock ticks (`SC_CLK_TCK` per second).
    start_ticks: start time after boot in clock ticks: (pid, start_ticks) names one process.
    rss_bytes: resident set size (field 24, pages × page size); None for a zombie.
    """

    comm: str
    state: str
    ppid: int
    cpu_ticks: int
    start_ticks: int
    rss_bytes: int | None

    @property
    def cpu_s(self) -> float:
        """User + system CPU time in seconds."""
        return self.cpu_ticks / CLK_TCK


class Unreadable(Exception):
    """The stat file exists but could not be read (permission: a `hidepid` mount)."""


def parse_stat(text: str) -> StatLine:
    """Parse the text of a `/proc/<pid>/stat` file. The command name sits in parentheses and
    may itself hold spaces and ")", so the fields are split after the last ")". Raises
    ValueError (or IndexError) for text that is not a stat line."""
    left = text.index("(")
    right = text.rindex(")")
    comm = text[left + 1 : right]
    rest = text[right + 2 :].split()
    # rest[0] is field 3 (state); field n is rest[n - 3]
    state = rest[0]
    rss_pages = int(rest[21])
    return StatLine(
        comm=comm,
        state=state,
        ppid=int(rest[1]),
        cpu_ticks=int(rest[11]) + int(rest[12]),
        start_ticks=int(rest[19]),
        rss_bytes=None if state == "Z" else rss_pages * _PAGE,
    )


def read_stat(pid: int, root: str = PROC_ROOT) -> StatLine | None:
    """One read of `<root>/<pid>/stat`. None when the process has gone (or the file is not a
    stat line, as a process exiting mid-read can leave); raises Unreadable when access is
    denied."""
    try:  # os.open/os.read: a third of the cost of a buffered `open` for a ~300-byte file
        fd = os.open(f"{root}/{pid}/stat", os.O_RDONLY)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
    except (FileNotFoundError, ProcessLookupError):
        return None
    except PermissionError as exc:
        raise Unreadable(str(exc)) from exc
    except OSError:
        return None
    try:
        return parse_stat(data.decode("utf-8", "replace"))
    except (ValueError, IndexError):
        return None


def list_pids(root: str = PROC_ROOT) -> list[int]:
    """The pids under `root` (numeric directory names), unsorted."""
    return [int(name) for name in os.listdir(root) if name.isdigit()]


def available(root: str = PROC_ROOT) -> bool:
    """Whether `root` is a Linux procfs with this process's own stat file."""
    return os.path.exists(f"{root}/{os.getpid()}/stat") or os.path.exists(f"{root}/self/stat")
