"""One read of /proc/<pid>/stat per process per sample (Linux): the process probe's fast path.

psutil reads a process's files several times per sample (a fresh `Process` for `is_running`,
`stat` for CPU times, `statm` for memory); `/proc/<pid>/stat` alone has everything that
changes between samples — the command name, the parent, user+system CPU ticks, the start time
(which, with the pid, identifies a process: a recycled pid has another start time) and the
resident set in pages (the same counter as `statm`'s second field). Field numbers below are
proc(5)'s, counted from 1. bench/probe_cost.py measures the difference (about 4× cheaper).
`StatFiles` keeps the files open between samples, so a sample costs one `pread` each.
"""

from __future__ import annotations

import os
from typing import NamedTuple

try:
    import resource
except ImportError:  # not on Windows; this module is for Linux
    resource = None  # type: ignore[assignment]

PROC_ROOT = "/proc"
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class StatLine(NamedTuple):
    """The fields of one `/proc/<pid>/stat` read that the probe uses (a tuple: one is built
    per process per sample, and a tuple is the cheapest to build).

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


def parse_stat(text: str | bytes) -> StatLine:
    """Parse the text of a `/proc/<pid>/stat` file. The command name sits in parentheses and
    may itself hold spaces and ")", so the fields are split after the last ")". Raises
    ValueError (or IndexError) for text that is not a stat line."""
    data = text.encode() if isinstance(text, str) else text
    left = data.index(b"(")
    right = data.rindex(b")")
    rest = data[right + 2 :].split(None, 22)  # fields 3..24 and the unparsed remainder
    # rest[0] is field 3 (state); field n is rest[n - 3]
    state = rest[0].decode()
    return StatLine(
        data[left + 1 : right].decode("utf-8", "replace"),
        state,
        int(rest[1]),
        int(rest[11]) + int(rest[12]),
        int(rest[19]),
        None if state == "Z" else int(rest[21]) * _PAGE,
    )


def read_stat(pid: int, root: str = PROC_ROOT) -> StatLine | None:
    """One read of `<root>/<pid>/stat`, nothing kept open (`StatFiles.read`'s results and
    errors)."""
    return StatFiles(root, limit=0).read(pid)


def _parsed(data: bytes) -> StatLine | None:
    try:
        return parse_stat(data)
    except (ValueError, IndexError):
        return None


def _fd_budget() -> int:
    """How many stat files a probe may keep open: half the soft RLIMIT_NOFILE (the rest for
    everything else llmtop opens), at most 16384."""
    if resource is None:
        return 0
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 16384 if soft == resource.RLIM_INFINITY else max(0, min(soft // 2, 16384))


class StatFiles:
    """`/proc/<pid>/stat` files kept open between samples, each re-read with one `pread`:
    half the system calls of open + read + close (bench/probe_cost.py). A kept file names
    one process, not a pid: once that process has gone its read fails (ESRCH), and the pid
    is opened afresh — a recycled pid then shows its new start time. At most `limit` files
    are kept (default `_fd_budget()`); the others are opened for each read.
    Not thread-safe: one reading thread owns it; `close()` when done.
    """

    def __init__(self, root: str = PROC_ROOT, limit: int | None = None) -> None:
        self.root = root
        self._limit = _fd_budget() if limit is None else limit
        self._fds: dict[int, int] = {}

    def read(self, pid: int) -> StatLine | None:
        """The stat line of `pid`. None when the process has gone (or the file is not a stat
        line, as a process exiting mid-read can leave); raises Unreadable when access is
        denied."""
        fd = self._fds.get(pid)
        if fd is not None:
            try:
                data = os.pread(fd, 4096, 0)
            except OSError:  # the process behind this file has gone (ESRCH)
                data = b""
            if data:
                return _parsed(data)
            self.forget(pid)
        try:  # os.open/os.read: a third of the cost of a buffered `open` for a ~300-byte file
            fd = os.open(f"{self.root}/{pid}/stat", os.O_RDONLY)
        except (FileNotFoundError, ProcessLookupError):
            return None
        except PermissionError as exc:
            raise Unreadable(str(exc)) from exc
        except OSError:
            return None
        try:
            data = os.read(fd, 4096)
        except OSError:
            data = b""
        if data and len(self._fds) < self._limit:
            self._fds[pid] = fd
        else:
            os.close(fd)
        return _parsed(data) if data else None

    def forget(self, pid: int) -> None:
        """Close the kept file of `pid` (gone from the listing), if any."""
        fd = self._fds.pop(pid, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        """Close every kept file."""
        for pid in list(self._fds):
            self.forget(pid)

    def __len__(self) -> int:
        return len(self._fds)


def list_pids(root: str = PROC_ROOT) -> list[int]:
    """The pids under `root` (numeric directory names), unsorted."""
    return [int(name) for name in os.listdir(root) if name.isdigit()]


def available(root: str = PROC_ROOT) -> bool:
    """Whether `root` is a Linux procfs with this process's own stat file."""
    return os.path.exists(f"{root}/{os.getpid()}/stat") or os.path.exists(f"{root}/self/stat")
