"""Process table: per-process reads under races, grouping by app, exact sums and order.

Small fakes stand in for psutil.Process only to produce the races a real machine cannot be
made to produce on demand (vanished, zombie, access denied); the integration test uses real
processes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from llmtop.probes import processes as procmod
from llmtop.probes.catalogue import Category
from llmtop.probes.processes import (
    AppUsage,
    Identity,
    ProcessProbe,
    ProcReading,
    group,
    identify,
    read_process,
)

MB = 1024 * 1024


class FakeProc:
    """Stands in for psutil.Process. `cpu` values are returned in turn by cpu_percent (the
    first one is psutil's priming 0.0); a value that is an exception instance is raised."""

    def __init__(
        self,
        pid: int,
        name: Any = "x",
        cpu: list[Any] | None = None,
        rss: Any = 1 * MB,
        exe: Any = None,
        cmdline: Any = None,
        running: bool = True,
    ) -> None:
        self.pid = pid
        self._name = name
        self._cpu = list(cpu if cpu is not None else [0.0, 0.0, 0.0])
        self._rss = rss
        self._exe = exe
        self._cmdline = cmdline
        self.running = running
        self.name_reads = 0

    @staticmethod
    def _give(value: Any) -> Any:
        if isinstance(value, BaseException):
            raise value
        return value

    @contextlib.contextmanager
    def oneshot(self) -> Iterator[None]:
        yield

    def name(self) -> Any:
        self.name_reads += 1
        return self._give(self._name)

    def exe(self) -> Any:
        return self._give(self._exe)

    def cmdline(self) -> Any:
        return self._give(self._cmdline)

    def cpu_percent(self, interval: float | None = None) -> Any:
        return self._give(self._cpu.pop(0) if len(self._cpu) > 1 else self._cpu[0])

    def memory_info(self) -> Any:
        return SimpleNamespace(rss=self._give(self._rss))

    def is_running(self) -> bool:
        return self.running


# --- read_process: one process, one reading


def test_first_reading_is_unknown_not_zero() -> None:
    proc = FakeProc(7, name="worker", cpu=[0.0, 42.5], rss=3 * MB)
    first = read_process(proc, first=True)
    second = read_process(proc, first=False)
    assert first == ProcReading(7, "worker", None, 3 * MB)
    assert second == ProcReading(7, "worker", 42.5, 3 * MB)


def test_vanished_process_reads_as_none() -> None:
    proc = FakeProc(8, cpu=[psutil.NoSuchProcess(8)])
    assert read_process(proc, first=False) is None


def test_zombie_and_access_denied_fields_are_none() -> None:
    zombie = FakeProc(9, name="defunct", cpu=[0.0, 0.0], rss=psutil.ZombieProcess(9))
    denied = FakeProc(10, name="secret", cpu=[psutil.AccessDenied(10)], rss=5 * MB)
    no_name = FakeProc(11, name=psutil.AccessDenied(11), cpu=[0.0, 1.5])
    assert read_process(zombie, first=False) == ProcReading(9, "defunct", 0.0, None)
    assert read_process(denied, first=False) == ProcReading(10, "secret", None, 5 * MB)
    assert read_process(no_name, first=False) == ProcReading(11, None, 0.0, 1 * MB)


def test_read_name_false_skips_the_name() -> None:
    proc = FakeProc(12, name="abc")
    reading = read_process(proc, first=False, read_name=False)
    assert reading is not None and reading.name is None and proc.name_reads == 0


def test_identify_uses_path_for_generic_names_and_survives_denial() -> None:
    code = FakeProc(1, exe="/usr/share/code/chrome_crashpad_handler", cmdline=[])
    denied = FakeProc(2, exe=psutil.AccessDenied(2), cmdline=psutil.AccessDenied(2))
    kworker = FakeProc(3)
    assert identify(code, "chrome_crashpad_handler") == Identity("VS Code", Category.IDE)
    assert identify(denied, "chrome_crashpad_handler") == Identity(
        "Google Chrome", Category.BROWSER
    )
    assert identify(kworker, "kworker/3:1-events") == Identity("kworker", Category.OTHER)
    assert identify(kworker, None) == Identity("(unknown)", Category.OTHER)


@pytest.mark.parametrize(("name", "cmdline", "app"), [
    # another llmtop (not its engine: that is an inference engine, below)
    ("python3", ["/usr/bin/python3", "-u", "-m", "llmtop", "--engine", "ollama"],
     "python3 -m llmtop"),
    # a one-liner hog: named as such, its code never shown, only the first 4 hex digits of
    # its SHA-256 (`printf 'while 1: pass' | sha256sum` → 4eda…), so that two different
    # one-liners are two apps (finding 8: "python3 -c … (2 processes)")
    ("python3", ["python3", "-c", "while 1: pass"], "python3 -c …#4eda"),
    ("python3", ["python3", "-c", ("from multiprocessing.spawn import spawn_main; "
                                   "spawn_main(tracker_fd=5, pipe_handle=7)"),
                 "--multiprocessing-fork"],
     "python3 (multiprocessing workers)"),
    ("python3.11", ["/venv/bin/python3.11", "-X", "importtime", "/home/u/train.py", "--lr", "3"],
     "python3.11 train.py"),
    ("node", ["node", "--max-old-space-size", "4096", "--inspect", "/srv/app/server.js"],
     "node server.js"),
    ("node", ["node", "-e", "for(;;){}"], "node -e …#b363"),  # sha256sum: b363…
    ("java", ["java", "-Xmx1g", "-jar", "/opt/tools/app.jar", "serve"], "java app.jar"),
    ("java", ["java", "-cp", "a.jar:b.jar", "-Dx=1", "org.example.Main"], "java org.example.Main"),
    ("python3", ["python3"], "python3"),  # an interactive interpreter: its plain name
    ("python3", psutil.AccessDenied(5), "python3"),  # unreadable: its plain name
])
def test_an_interpreter_is_named_by_the_program_it_runs(name, cmdline, app) -> None:
    proc = FakeProc(5, exe="/usr/bin/" + name, cmdline=cmdline)
    assert identify(proc, name) == Identity(app, Category.OTHER)


def test_another_llmtops_engine_child_is_an_inference_engine() -> None:
    # it was plain "python" (newcomer row 8); servers/child.py starts `python -m llmtop engine`
    proc = FakeProc(5, exe="/usr/bin/python3",
                    cmdline=["/usr/bin/python3", "-u", "-m", "llmtop", "engine", "--port", "9"])
    assert identify(proc, "python3") == Identity("llmtop engine", Category.INFERENCE)


def test_interpreters_running_different_programs_are_different_apps() -> None:
    hog = FakeProc(6, exe="/usr/bin/python3", cmdline=["python3", "-c", "while 1: pass"])
    tool = FakeProc(7, exe="/usr/bin/python3", cmdline=["python3", "/usr/bin/unattended-upgrade"])
    assert identify(hog, "python3").app != identify(tool, "python3").app


# --- group: pure grouping with exact numbers


def _row(pid: int, cpu: float | None, rss: int | None, app: str, cat: Category) -> Any:
    return ProcReading(pid, app, cpu, rss), Identity(app, cat)


def test_browser_helpers_collapse_into_one_app_with_exact_sums() -> None:
    rows = [
        _row(101, 12.5, 150 * MB, "Chromium", Category.BROWSER),
        _row(102, 30.0, 300 * MB, "Chromium", Category.BROWSER),
        _row(103, 0.5, 80 * MB, "Chromium", Category.BROWSER),
        _row(104, None, 20 * MB, "Chromium", Category.BROWSER),  # new helper: unknown CPU
        _row(200, 8.0, 40 * MB, "bash", Category.OTHER),
        _row(300, None, None, "denied", Category.OTHER),
        _row(1, 4.0, 60 * MB, "python3", Category.OTHER),  # llmtop itself
        _row(50, 150.0, 900 * MB, "llama-server", Category.INFERENCE),  # the engine
    ]
    sample = group(rows, self_pids={1}, engine_pids={50}, cpus=4)
    # Chromium: CPU 12.5 + 30.0 + 0.5 = 43.0 (104 unknown, left out); RSS 150+300+80+20 =
    # 550 MB; machine share 43.0 / 4 = 10.75 %.
    chromium = AppUsage(
        "Chromium", Category.BROWSER, 43.0, 550 * MB, 4, (101, 102, 103, 104), True, 10.75
    )
    assert sample.apps == (
        AppUsage("llama-server", Category.ENGINE, 150.0, 900 * MB, 1, (50,), False, 37.5),
        chromium,
        AppUsage("bash", Category.OTHER, 8.0, 40 * MB, 1, (200,), False, 2.0),
        AppUsage("llmtop", Category.SELF, 4.0, 60 * MB, 1, (1,), False, 1.0),
        AppUsage("denied", Category.OTHER, None, None, 1, (300,), False, None),
    )
    assert sample.self_cpu_percent == 4.0
    assert sample.engine_cpu_percent == 150.0
    assert sample.n_procs == 8 and sample.logical_cpus == 4
    assert sample.top(2) == sample.apps[:2]


def test_the_build_tool_that_started_llmtop_is_not_a_build() -> None:
    # new-user pass D24: `make run` (llmtop's parent, waiting for it) was listed as the build
    # "Make/Ninja/CMake", whose remedy is "wait for the build to finish"
    rows = [
        (ProcReading(40, "make", 0.0, 2 * MB), Identity("Make/Ninja/CMake", Category.BUILD)),
        (ProcReading(41, "make", 90.0, 3 * MB), Identity("Make/Ninja/CMake", Category.BUILD)),
        (ProcReading(39, "bash", 0.0, 4 * MB), Identity("bash", Category.OTHER)),
    ]
    sample = group(rows, launcher_pids={39, 40}, cpus=2)
    assert [(a.app, a.category, a.pids) for a in sample.apps] == [
        ("Make/Ninja/CMake", Category.BUILD, (41,)),  # another make, compiling: a build
        ("bash", Category.OTHER, (39,)),  # an ancestor that is no build keeps its name
        ("make (started llmtop)", Category.OTHER, (40,)),  # 0.0 % CPU: by RSS, 2 MB < 4 MB
    ]


def test_the_launchers_are_this_processes_ancestors() -> None:
    import os

    ancestors = procmod.launcher_pids()
    assert os.getppid() in ancestors and os.getpid() not in ancestors


def test_another_llmtop_is_not_llmtop_itself() -> None:
    # second new-user pass P8: a neighbour's llmtop CLI at 60 % read "llmtop 60 %" in the
    # remedy, as if it were this llmtop
    rows = [_row(1, 4.0, MB, "llmtop", Category.OTHER), _row(9, 60.0, MB, "llmtop",
                                                             Category.OTHER)]
    sample = group(rows, self_pids={1}, cpus=2)
    assert [(a.app, a.category, a.pids) for a in sample.apps] == [
        ("another llmtop", Category.OTHER, (9,)), ("llmtop", Category.SELF, (1,))]


def test_no_engine_pids_means_engine_cpu_is_none() -> None:
    sample = group([_row(5, 1.0, MB, "a", Category.OTHER)], self_pids={5}, cpus=2)
    assert sample.engine_cpu_percent is None
    assert sample.self_cpu_percent == 1.0


def test_ties_sort_by_rss_then_name() -> None:
    rows = [
        _row(1, 0.0, 10 * MB, "b", Category.OTHER),
        _row(2, 0.0, 10 * MB, "a", Category.OTHER),
        _row(3, 0.0, 99 * MB, "c", Category.OTHER),
    ]
    assert [a.app for a in group(rows).apps] == ["c", "a", "b"]


# --- ProcessProbe over a fake process table


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> dict[int, FakeProc]:
    """A fake process table behind psutil.pids() / psutil.Process()."""
    procs: dict[int, FakeProc] = {}

    def make(pid: int) -> FakeProc:
        if pid not in procs:
            raise psutil.NoSuchProcess(pid)
        return procs[pid]

    monkeypatch.setattr(psutil, "pids", lambda: sorted(procs))
    monkeypatch.setattr(psutil, "Process", make)
    monkeypatch.setattr(procmod, "logical_cpus", lambda: 2)
    monkeypatch.setattr(procmod, "default_proc_root", lambda: None)  # the psutil path
    return procs


def test_probe_survives_vanished_zombie_and_denied(table: dict[int, FakeProc]) -> None:
    table[1] = FakeProc(1, "python3", cpu=[0.0, 3.0, 3.0], rss=50 * MB)
    table[10] = FakeProc(10, "chromium", cpu=[0.0, 20.0, 20.0], rss=100 * MB)
    table[11] = FakeProc(11, "chromium", cpu=[0.0, 5.0, 5.0], rss=60 * MB)
    # listed, then gone before its second reading
    table[20] = FakeProc(20, "shortlived", cpu=[0.0, psutil.NoSuchProcess(20)])
    table[30] = FakeProc(30, "defunct", cpu=[0.0, 0.0, 0.0], rss=psutil.ZombieProcess(30))
    table[40] = FakeProc(40, "root-daemon", cpu=[psutil.AccessDenied(40)], rss=7 * MB)
    probe = ProcessProbe(self_pids={1})

    first = probe.sample()
    assert first.warming_up is True
    assert all(app.cpu_percent is None for app in first.apps)
    assert first.self_cpu_percent is None

    second = probe.sample()
    assert second.warming_up is False
    by_app = {a.app: a for a in second.apps}
    assert "shortlived" not in by_app  # vanished: dropped, no exception
    assert (by_app["Chromium"].cpu_percent, by_app["Chromium"].rss_bytes) == (25.0, 160 * MB)
    assert by_app["Chromium"].n_procs == 2 and by_app["Chromium"].is_browser
    assert (by_app["defunct"].cpu_percent, by_app["defunct"].rss_bytes) == (0.0, None)
    assert (by_app["root-daemon"].cpu_percent, by_app["root-daemon"].rss_bytes) == (None, 7 * MB)
    assert second.apps[-1].app == "root-daemon"  # unknown CPU sorts last
    assert [a.app for a in second.apps[:2]] == ["Chromium", "llmtop"]
    assert second.self_cpu_percent == 3.0
    assert by_app["Chromium"].cpu_percent_machine == 12.5  # 25 % of one core on 2 CPUs


def test_pid_reuse_starts_a_new_reading(table: dict[int, FakeProc]) -> None:
    table[5] = FakeProc(5, "old", cpu=[0.0, 50.0, 50.0])
    probe = ProcessProbe(self_pids=set())
    probe.sample()
    assert probe.sample().apps[0].cpu_percent == 50.0
    table[5].running = False  # the pid now belongs to another process
    table[5] = FakeProc(5, "new", cpu=[0.0, 9.0])
    third = probe.sample()
    assert [(a.app, a.cpu_percent) for a in third.apps] == [("new", None)]


def test_exec_renames_the_process_and_it_is_reidentified(table: dict[int, FakeProc]) -> None:
    launcher = FakeProc(6, "google-chrome-st", cpu=[0.0, 1.0, 1.0])  # shell launcher script
    table[6] = launcher
    probe = ProcessProbe(self_pids=set())
    assert probe.sample().apps[0].app == "Google Chrome"
    launcher._name = "bash"  # exec'd into something else within the same pid/start time
    assert probe.sample().apps[0].app == "bash"


def test_new_process_after_first_sample_is_unknown_then_known(
    table: dict[int, FakeProc],
) -> None:
    table[1] = FakeProc(1, "a", cpu=[0.0, 2.0, 2.0])
    probe = ProcessProbe(self_pids=set(), engine_pids=lambda: {2})
    probe.sample()
    table[2] = FakeProc(2, "llama-server", cpu=[0.0, 90.0])
    second = probe.sample()
    assert second.warming_up is False
    assert {a.app: a.cpu_percent for a in second.apps} == {"a": 2.0, "llama.cpp": None}
    assert second.engine_cpu_percent is None  # its only pid has no reading yet
    third = probe.sample()
    assert third.engine_cpu_percent == 90.0
    assert third.apps[0] == AppUsage("llama.cpp", Category.ENGINE, 90.0, MB, 1, (2,), False, 45.0)


def test_failing_pid_callback_does_not_break_sampling(table: dict[int, FakeProc]) -> None:
    table[1] = FakeProc(1, "a")

    def broken() -> set[int]:
        raise RuntimeError("engine not started")

    sample = ProcessProbe(self_pids=set(), engine_pids=broken).sample()
    assert sample.engine_cpu_percent is None and len(sample.apps) == 1


def test_linux_kernel_threads_are_one_app(monkeypatch):
    from llmtop.probes import processes

    class KThread:
        pid = 77

        def ppid(self):
            return 2  # a child of kthreadd

    class Ordinary(KThread):
        def ppid(self):
            return 1

        def exe(self):
            return "/usr/bin/foo"

        def cmdline(self):
            return ["foo"]

    class Kthreadd(KThread):
        pid = 2

        def ppid(self):
            return 0  # their parent, started by the kernel

    monkeypatch.setattr(processes.sys, "platform", "linux")
    assert processes.identify(KThread(), "kworker/0:1-events").app == processes.KERNEL_APP
    # new-user pass D24: kthreadd was listed apart, beside "kernel threads"
    assert processes.identify(Kthreadd(), "kthreadd").app == processes.KERNEL_APP
    assert processes._identify_pid(2, "kthreadd", ppid=0).app == processes.KERNEL_APP
    assert processes.identify(Ordinary(), "foo").app == "foo"
    monkeypatch.setattr(processes.sys, "platform", "darwin")
    assert processes.identify(KThread(), "kworker/0:1-events").app == "kworker"


# --- machines unlike this one: pid 0, a process stuck in the kernel


class StuckProc(FakeProc):
    """Reading its name blocks until `gate` is set, as psutil's read of /proc/<pid>/cmdline
    does for a process stuck in the kernel."""

    def __init__(self, pid: int, gate: Any) -> None:
        super().__init__(pid, "stuck")
        self.gate = gate

    def name(self) -> Any:
        self.gate.wait()
        return super().name()


def test_pid_0_is_never_an_application(table: dict[int, FakeProc]) -> None:
    # Windows reports idle time as "System Idle Process", pid 0, at ~100 % per core.
    table[0] = FakeProc(0, "System Idle Process", cpu=[0.0, 1600.0])
    table[7] = FakeProc(7, "bash", cpu=[0.0, 1.0])
    probe = ProcessProbe(self_pids=set())
    probe.sample()
    assert [a.app for a in probe.sample().apps] == ["bash"]


def test_stuck_process_read_gives_up_then_is_skipped(table: dict[int, FakeProc]) -> None:
    import threading

    gate = threading.Event()
    table[7] = FakeProc(7, "bash", cpu=[0.0, 1.0])
    probe = ProcessProbe(self_pids=set(), read_timeout_s=0.2)
    probe.sample()
    table[66] = StuckProc(66, gate)  # appears, and reading its name hangs
    try:
        with pytest.raises(procmod.ProbeTimeout, match="reading process 66 took over 0.2 s"):
            probe.sample()
        assert probe.stuck == {66}
        later = probe.sample()  # pid 66 is skipped: the probe works again
        assert [(a.app, a.cpu_percent) for a in later.apps] == [("bash", 1.0)]
    finally:
        gate.set()  # let the abandoned worker thread finish


def test_sampler_reports_a_stuck_probe_and_quits_fast(table: dict[int, FakeProc]) -> None:
    import threading
    import time

    from llmtop.probes.sampler import ProbeSampler
    from llmtop.probes.system import SystemProbe

    gate = threading.Event()
    table[66] = StuckProc(66, gate)
    probe = ProcessProbe(self_pids=set(), read_timeout_s=0.2)
    sampler = ProbeSampler(0.05, process_probe=probe, gpu=False, system_probe=SystemProbe(None))
    try:
        sample = sampler.sample_once()
        assert sample.processes is None
        errors = [f for f in sample.verdict.findings if f.code == "probe-error"]
        assert len(errors) == 1 and "process 66" in errors[0].message
        # A probe blocked for good must not hold up quitting: stop() waits at most 0.5 s.
        blocked = threading.Event()

        class Hung:
            def sample(self) -> Any:
                blocked.set()
                gate.wait()

        hung = ProbeSampler(
            0.05, process_probe=Hung(), gpu=False, system_probe=SystemProbe(None)  # type: ignore[arg-type]
        )
        hung.start()
        assert blocked.wait(5.0)
        t0 = time.perf_counter_ns()
        hung.stop()
        assert (time.perf_counter_ns() - t0) / 1e9 < 1.0
    finally:
        gate.set()
