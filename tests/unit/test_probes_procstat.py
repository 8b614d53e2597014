"""The Linux fast path of the process probe: one /proc/<pid>/stat read per process.

Stat files are written here in the kernel's format (proc(5)), into a directory that stands in
for /proc; their pids lie above Linux's largest pid (2**22), so the identification through
psutil finds no such process and names each by its command name. Expected values are
computed by hand from the fields written.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llmtop.probes import procstat
from llmtop.probes.catalogue import Category
from llmtop.probes.processes import Identity, ProcessProbe, _cpu_percent, _StatTracked

PID = 5_000_001  # above pid_max's ceiling (4194304): never a real process


def stat_text(pid: int, comm: str, *, state: str = "S", ppid: int = 1, utime: int = 0,
              stime: int = 0, start: int = 1000, rss_pages: int = 256) -> str:
    """A stat line: fields 1..52, the ones the probe reads set from the arguments."""
    fields = ["0"] * 52
    fields[0], fields[1], fields[2], fields[3] = str(pid), f"({comm})", state, str(ppid)
    fields[13], fields[14] = str(utime), str(stime)  # fields 14, 15
    fields[21], fields[23] = str(start), str(rss_pages)  # fields 22, 24
    return " ".join(fields) + "\n"


def write(root: Path, pid: int, text: str) -> None:
    (root / str(pid)).mkdir(exist_ok=True)
    (root / str(pid) / "stat").write_text(text)


def test_parse_takes_the_name_up_to_the_last_parenthesis() -> None:
    line = procstat.parse_stat(stat_text(7, "a) (b c", utime=30, stime=12, start=99, rss_pages=3))
    assert line.comm == "a) (b c"
    assert (line.state, line.ppid, line.cpu_ticks, line.start_ticks) == ("S", 1, 42, 99)
    assert line.rss_bytes == 3 * os.sysconf("SC_PAGE_SIZE")


def test_zombie_has_no_resident_set() -> None:
    assert procstat.parse_stat(stat_text(7, "defunct", state="Z")).rss_bytes is None


def test_read_stat_of_a_vanished_process_is_none(tmp_path: Path) -> None:
    assert procstat.read_stat(PID, str(tmp_path)) is None
    write(tmp_path, PID, "garbage")
    assert procstat.read_stat(PID, str(tmp_path)) is None


def test_cpu_percent_is_ticks_over_elapsed_time() -> None:
    # 50 ticks more in 1 s: 50 / CLK_TCK s of CPU in 1 s of wall time
    tracked = _StatTracked(1, "x", Identity("x", Category.OTHER), cpu_ticks=100, t_ns=0)
    line = procstat.parse_stat(stat_text(7, "x", utime=100, stime=50))
    expected = 50 / procstat.CLK_TCK * 100.0
    assert _cpu_percent(tracked, line, 1_000_000_000) == pytest.approx(expected)
    assert _cpu_percent(tracked, line, 0) is None


@pytest.mark.skipif(not procstat.available(), reason="needs Linux procfs")
def test_probe_over_a_fake_procfs(tmp_path: Path) -> None:
    root = str(tmp_path)
    write(tmp_path, PID, stat_text(PID, "worker", utime=10, start=500))
    write(tmp_path, PID + 1, stat_text(PID + 1, "gone-soon", start=600))
    probe = ProcessProbe(self_pids=set(), proc_root=root)
    first = probe.sample()
    assert {a.app for a in first.apps} == {"worker", "gone-soon"}
    assert all(a.cpu_percent is None for a in first.apps)  # first reading: unknown

    write(tmp_path, PID, stat_text(PID, "worker", utime=10, start=500))  # no CPU used
    (tmp_path / str(PID + 1) / "stat").unlink()
    (tmp_path / str(PID + 1)).rmdir()
    second = probe.sample()
    assert [(a.app, a.cpu_percent) for a in second.apps] == [("worker", 0.0)]

    # the pid recycled (another start time) under another name: a new, unknown process
    write(tmp_path, PID, stat_text(PID, "newcomer", utime=5000, start=900))
    third = probe.sample()
    assert [(a.app, a.cpu_percent) for a in third.apps] == [("newcomer", None)]

    # exec: same pid and start time, a new command name; the CPU baseline is kept
    write(tmp_path, PID, stat_text(PID, "execd", utime=5000, start=900))
    fourth = probe.sample()
    assert [(a.app, a.cpu_percent) for a in fourth.apps] == [("execd", 0.0)]


@pytest.mark.skipif(not procstat.available(), reason="needs Linux procfs")
def test_fast_path_agrees_with_psutil_on_this_process() -> None:
    import psutil

    line = procstat.read_stat(os.getpid())
    assert line is not None
    times = psutil.Process().cpu_times()
    # psutil reads the same ticks (from the same file), converted to seconds
    assert line.cpu_s == pytest.approx(times.user + times.system, abs=0.2)
    assert line.ppid == os.getppid()


@pytest.mark.skipif(not procstat.available(), reason="needs Linux procfs")
def test_a_kernel_thread_is_known_by_its_parent_without_psutil(tmp_path: Path) -> None:
    # kthreadd (pid 2) is every kernel thread's parent; a fake pid psutil cannot find would
    # otherwise be named by its command name ("kworker")
    write(tmp_path, PID, stat_text(PID, "kworker/1:2-events", ppid=2))
    probe = ProcessProbe(self_pids=set(), proc_root=str(tmp_path))
    assert [a.app for a in probe.sample().apps] == ["kernel threads"]


def test_kept_stat_files_are_read_again_and_closed(tmp_path: Path) -> None:
    write(tmp_path, PID, stat_text(PID, "worker", utime=1))
    files = procstat.StatFiles(str(tmp_path))
    first = files.read(PID)
    assert first is not None and first.cpu_ticks == 1 and len(files) == 1
    write(tmp_path, PID, stat_text(PID, "worker", utime=7))  # same file, new contents
    again = files.read(PID)
    assert again is not None and again.cpu_ticks == 7 and len(files) == 1
    files.forget(PID)
    assert len(files) == 0
    none_kept = procstat.StatFiles(str(tmp_path), limit=0)
    assert none_kept.read(PID) == again and len(none_kept) == 0  # read, not kept
    assert files.read(PID + 5) is None  # no such process
    files.close()


@pytest.mark.skipif(not procstat.available(), reason="needs Linux procfs")
def test_a_kept_file_of_a_process_that_ended_is_reopened() -> None:
    import subprocess

    child = subprocess.Popen(["sleep", "30"])
    files = procstat.StatFiles()
    try:
        line = files.read(child.pid)
        assert line is not None and line.comm == "sleep" and len(files) == 1
    finally:
        child.kill()
        child.wait()
    assert files.read(child.pid) is None  # ESRCH on the kept file, then no such file
    assert len(files) == 0
