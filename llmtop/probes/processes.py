"""Top processes, grouped by application, with llmtop's own and the engine's CPU kept apart.

CPU % here is psutil's per-process figure: 100 = one full logical core, so a multi-threaded
process can exceed 100. `AppUsage.cpu_percent_machine` is the same figure divided by the
logical CPU count (0–100 % of the whole machine), the unit the verdict's background rule uses.

psutil measures a process's CPU as the difference between two readings of the same
`psutil.Process` object, so the probe caches those objects between samples, keyed by
(pid, create_time) — a recycled pid is a new process. A process's first reading is unknown
(None), never 0.0. Processes vanish, turn zombie or deny access between listing and reading;
the probe never raises for that: a vanished process is dropped, an unreadable value is None.

Why not `psutil.process_iter(attrs)`: its Process cache is module-wide, so any other caller
of `cpu_percent()` on those objects would reset this probe's baselines, and it cannot skip
fields per process. Instead one pass over `psutil.pids()` reads, per known process, its
identity (`is_running`, one /proc/<pid>/stat read) and then CPU and RSS in one `oneshot()`
(stat + statm); exe/cmdline only once per process lifetime and only for generic names; the
name on a process's first samples and every `NAME_RECHECK`-th after.

On Linux the probe reads less still (`procstat.py`): one `/proc/<pid>/stat` read per process
per sample gives CPU ticks, RSS, the command name and the start time. A process is identified
once (name, command line, app) through psutil, keyed by (pid, start time), and again only
when its command name changes (an exec). CPU % is then computed here from the tick difference
over the perf_counter_ns difference between two reads, which is psutil's own formula.
`bench/probe_cost.py` measures both paths.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import psutil

from llmtop.probes import procstat
from llmtop.probes.catalogue import Category, classify, needs_path
from llmtop.probes.readworker import ReadWorker
from llmtop.probes.system import container_limits, cpu_capacity, logical_cpus, machine_percent

PidSource = Callable[[], Collection[int]] | Collection[int]
"""A set of pids, or a callable returning one (called at every sample, so it may change)."""

SELF_APP = "llmtop"
OTHER_SELF_APP = "another llmtop"  # an llmtop process that is not this one
NAME_RECHECK = 16  # samples between name re-reads of a known process (see _Tracked.name_due)


class ProcLike(Protocol):
    """The part of `psutil.Process` the probe reads (tests feed small fakes)."""

    @property
    def pid(self) -> int: ...

    def oneshot(self) -> AbstractContextManager[Any]: ...

    def name(self) -> str: ...

    def exe(self) -> str: ...

    def cmdline(self) -> list[str]: ...

    def cpu_percent(self, interval: float | None = None) -> float: ...

    def memory_info(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class AppUsage:
    """One application: all its processes together.

    cpu_percent: sum over its processes, % of one core (psutil semantics); sums only the
        processes whose reading is known; None while none is known (warming up / denied).
    rss_bytes: summed resident set size in bytes (shared pages count once per process, so
        this overstates multi-process apps, as every top-like tool does); None when unknown.
    cpu_percent_machine: cpu_percent / logical CPUs, 0–100 % of the machine; None likewise.
    """

    app: str
    category: Category
    cpu_percent: float | None
    rss_bytes: int | None
    n_procs: int
    pids: tuple[int, ...]
    is_browser: bool
    cpu_percent_machine: float | None = None


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """The process table, grouped.

    apps: every app, CPU descending; unknown (None) CPU last, ties by RSS then name.
    self_cpu_percent: llmtop's own process (all its threads), % of one core; None if unknown.
    engine_cpu_percent: the measured engine's pids summed, % of one core; None when no engine
        pids are given or none of them could be read yet.
    warming_up: True on a probe's first sample (no process has a CPU reading yet).
    n_procs: processes read; logical_cpus: divisor for machine %.
    engine_identified: at least one of the measured engine's pids was seen in this sample;
        False means an inference engine in `apps` may be the measured one (verdict hedges).
    """

    apps: tuple[AppUsage, ...]
    self_cpu_percent: float | None
    engine_cpu_percent: float | None
    warming_up: bool
    n_procs: int = 0
    logical_cpus: float = 1
    engine_identified: bool = False

    def top(self, n: int) -> tuple[AppUsage, ...]:
        """The `n` busiest apps."""
        return self.apps[:n]


class ProcReading(NamedTuple):
    """One process, one sample: name, CPU % of one core (None = unknown), RSS bytes (a
    tuple: one is built per process per sample, and a tuple is the cheapest to build)."""

    pid: int
    name: str | None
    cpu_percent: float | None
    rss_bytes: int | None


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a process is: display app name and category (before self/engine overrides)."""

    app: str
    category: Category


def _field(read: Callable[[], Any]) -> Any:
    """One psutil read: AccessDenied / ZombieProcess → None; NoSuchProcess propagates."""
    try:
        return read()
    except (psutil.AccessDenied, psutil.ZombieProcess):
        return None


def read_process(proc: ProcLike, *, first: bool, read_name: bool = True) -> ProcReading | None:
    """Read name, CPU % and RSS of one process in one `oneshot()`; None if it has vanished.

    `first`: this is the probe's first reading of this process object; its CPU % is then
    unknown (psutil returns a meaningless 0.0 that only primes the next reading).
    `read_name`: False skips the name (`name=None`): psutil re-reads the command line for
    every 15-character name, which would double the cost of a sample.
    Never raises for NoSuchProcess/ZombieProcess/AccessDenied: unreadable fields are None.
    """
    try:
        with proc.oneshot():
            name = _field(proc.name) if read_name else None
            cpu = _field(lambda: proc.cpu_percent(None))
            mem = _field(proc.memory_info)
    except psutil.ZombieProcess:
        return ProcReading(proc.pid, None, None, None)
    except psutil.NoSuchProcess:
        return None
    except psutil.AccessDenied:
        return ProcReading(proc.pid, None, None, None)
    rss = getattr(mem, "rss", None) if mem is not None else None
    return ProcReading(
        pid=proc.pid,
        name=name,
        cpu_percent=None if first or cpu is None else float(cpu),
        rss_bytes=int(rss) if rss is not None else None,
    )


def identify(proc: ProcLike, name: str | None) -> Identity:
    """The app a process belongs to: catalogue entry, else its own name (category other).

    Reads exe and cmdline only for generic names (`catalogue.needs_path`); unreadable → skipped.
    """
    if _is_kernel_thread(proc):
        # kworker/…, ksoftirqd/…, kdamond…: dozens of them; one line says "the kernel is busy"
        return Identity(KERNEL_APP, Category.OTHER)
    exe: str | None = None
    cmdline: list[str] | None = None
    from_memory = bool(name and name.startswith("memfd:"))
    if needs_path(name) or from_memory:
        try:
            exe = _field(proc.exe)
            cmdline = _field(proc.cmdline)
        except psutil.NoSuchProcess:
            pass
    rule = classify(name, exe, cmdline)
    if rule is not None:
        return Identity(rule.app, rule.category)
    if from_memory and cmdline:
        # Run from an anonymous memory file: "memfd:sealed-91" says nothing; its argv[0] does.
        name = os.path.basename(cmdline[0]) or name
    program = interpreted_program(name, cmdline)
    if program is not None:
        return Identity(program, Category.OTHER)
    return Identity(_group_name(name), Category.OTHER)


# An interpreter's options that take the next argument as their value (so it is not the
# program): python -W/-X/-Q, node -r/--require/--import/-e is code, java's class path and -D.
_OPTION_WITH_VALUE = {
    "python": {"-W", "-X", "-Q", "--check-hash-based-pycs"},
    "node": {"-r", "--require", "--import", "--loader", "--experimental-loader", "--conditions",
             "--title", "--env-file", "--max-old-space-size"},
    "java": {"-cp", "-classpath", "--class-path", "-p", "--module-path", "--add-modules",
             "--add-opens", "--add-exports"},
}


# What CPython's multiprocessing runs with -c in its spawn and forkserver children
MULTIPROCESSING_CODE = ("from multiprocessing.", "import multiprocessing")


def code_tag(code: str) -> str:
    """"…#3f2a": a one-liner's code never shown (it may hold a secret), only the first 4 hex
    digits of its SHA-256, so that two different one-liners are two apps, not "python3 -c …
    (2 processes)", and the same one twice is one."""
    return "…#" + hashlib.sha256(code.encode("utf-8", "replace")).hexdigest()[:4]


def interpreted_program(name: str | None, cmdline: list[str] | None) -> str | None:
    """What an uncatalogued interpreter runs, as a group name a person recognises (htop's
    command-line view, shortened): "python3 -m llmtop", "python3 train.py", "python3 -c …#3f2a"
    (`code_tag`), "python3 (multiprocessing workers)", "node server.js", "java app.jar",
    "java org.example.Main"; None for a process that is
    not python, node or java, or whose command line is unreadable or names no program (an
    interactive interpreter keeps its plain name). Only a module name or a file's base name
    is shown, never a `-c` one-liner's code or any other argument (they may hold secrets)."""
    if not name or not cmdline:
        return None
    low = name.lower()
    family = "python" if low.startswith("python") else low if low in ("node", "java") else None
    if family is None:
        return None
    takes_value = _OPTION_WITH_VALUE[family]
    args = iter(cmdline[1:])
    for arg in args:
        if family == "python" and arg in ("-m", "-c"):
            following = next(args, "")
            if arg == "-m" and following:
                return f"{name} -m {following}"
            if following.startswith(MULTIPROCESSING_CODE):  # spawn/forkserver workers
                return f"{name} (multiprocessing workers)"
            return f"{name} -c {code_tag(following)}"
        if family == "node" and arg in ("-e", "--eval", "-p", "--print"):
            return f"{name} -e {code_tag(next(args, ''))}"
        if family == "java" and arg == "-jar":
            jar = next(args, "")
            return f"{name} {os.path.basename(jar)}" if jar else None
        if arg in takes_value:
            next(args, None)
            continue
        if arg.startswith("-"):
            continue
        shown = arg if family == "java" else os.path.basename(arg)
        return f"{name} {shown}" if shown else None
    return None


KERNEL_APP = "kernel threads"


def _is_kernel_thread(proc: ProcLike) -> bool:
    """Linux kernel threads are kthreadd (pid 2, parent 0) and its children."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        ppid = proc.ppid()  # type: ignore[attr-defined]
    except (AttributeError, psutil.Error):
        return False
    return bool(ppid == 2 or (ppid == 0 and proc.pid == 2))


def _group_name(name: str | None) -> str:
    """Group key for an uncatalogued process: its name, with Linux kernel-thread suffixes
    dropped ("kworker/3:1-events" → "kworker", "ksoftirqd/0" → "ksoftirqd")."""
    if not name:
        return "(unknown)"
    head = name.split("/", 1)[0]
    return head or name


def _sum_known(values: Iterable[float | int | None]) -> Any:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def group(
    rows: Iterable[tuple[ProcReading, Identity]],
    *,
    self_pids: Collection[int] = (),
    engine_pids: Collection[int] = (),
    launcher_pids: Collection[int] = (),
    cpus: float = 1,
    warming_up: bool = False,
) -> ProcessSample:
    """Pure: group readings into apps and sort them (see `ProcessSample`).

    Self pids become the app "llmtop" (category SELF); engine pids keep their app name with
    category ENGINE; self wins if a pid is in both. launcher_pids: llmtop's ancestors (the
    shell, `make run`…): one the catalogue calls a build is not one, it waits for llmtop, and
    is "make (started llmtop)" in category OTHER, so no "wait for the build" remedy names it.
    """
    groups: dict[tuple[str, Category], list[ProcReading]] = {}
    self_cpu: list[float | None] = []
    engine_cpu: list[float | None] = []
    engine_seen = False
    n = 0
    for reading, ident in rows:
        n += 1
        key = (ident.app, ident.category)
        if reading.pid in self_pids:
            key = (SELF_APP, Category.SELF)
            self_cpu.append(reading.cpu_percent)
        elif reading.pid in engine_pids:
            key = (ident.app, Category.ENGINE)
            engine_cpu.append(reading.cpu_percent)
            engine_seen = True
        elif reading.pid in launcher_pids and ident.category is Category.BUILD:
            key = (f"{reading.name or ident.app} (started llmtop)", Category.OTHER)
        elif ident.app == SELF_APP:  # another llmtop's process, not this one's: said so
            # (a neighbour's llmtop at 60 % read as this one: "llmtop 60 %")
            key = (OTHER_SELF_APP, ident.category)
        groups.setdefault(key, []).append(reading)
    return ProcessSample(
        apps=_apps(groups, cpus),
        self_cpu_percent=_sum_known(self_cpu),
        engine_cpu_percent=_sum_known(engine_cpu) if engine_pids else None,
        warming_up=warming_up,
        n_procs=n,
        logical_cpus=cpus,
        engine_identified=engine_seen,
    )


def _apps(groups: dict[tuple[str, Category], list[ProcReading]], cpus: float
          ) -> tuple[AppUsage, ...]:
    """One `AppUsage` per (app, category) group of readings, in `ProcessSample.apps`'s
    order; cpus: the logical CPU count that divides a CPU % into the machine's."""
    apps = []
    for (app, category), members in groups.items():
        cpu = _sum_known(r.cpu_percent for r in members)
        apps.append(
            AppUsage(
                app=app,
                category=category,
                cpu_percent=cpu,
                rss_bytes=_sum_known(r.rss_bytes for r in members),
                n_procs=len(members),
                pids=tuple(sorted(r.pid for r in members)),
                is_browser=category is Category.BROWSER,
                cpu_percent_machine=machine_percent(cpu, cpus),
            )
        )
    apps.sort(key=_sort_key)
    return tuple(apps)


def _sort_key(a: AppUsage) -> tuple[bool, float, int, str]:
    return (a.cpu_percent is None, -(a.cpu_percent or 0.0), -(a.rss_bytes or 0), a.app)


def _pids(source: PidSource | None) -> frozenset[int]:
    if source is None:
        return frozenset()
    try:
        return frozenset(source() if callable(source) else source)
    except Exception:  # noqa: BLE001 -- a caller's pid callback must not break sampling
        return frozenset()


@dataclass(slots=True)
class _Tracked:
    proc: psutil.Process
    ident: Identity
    name: str | None
    readings: int = 0  # CPU readings taken so far (0: the next one only primes psutil)

    def name_due(self) -> bool:
        """Whether to re-read the name this sample: exec() keeps pid and start time but
        changes the program (launcher scripts such as google-chrome exec the real binary at
        once), so on the first samples of a process, then every `NAME_RECHECK`-th sample
        (staggered by pid so the cost is spread)."""
        return self.readings < 3 or (self.readings + self.proc.pid) % NAME_RECHECK == 0


@dataclass(slots=True)
class _StatTracked:
    """A process known to the Linux fast path: identified once, then only its counters."""

    start_ticks: int
    comm: str
    ident: Identity
    cpu_ticks: int
    t_ns: int


def default_proc_root() -> str | None:
    """The procfs the fast path reads (`/proc` on Linux), or None elsewhere (psutil path)."""
    if sys.platform.startswith("linux") and procstat.available():
        return procstat.PROC_ROOT
    return None


class ProbeTimeout(Exception):
    """Reading the process table did not finish in time (a process stuck in the kernel)."""


class _NoFiles:
    """The psutil path's reading-thread state: nothing kept open."""

    def close(self) -> None:
        """Nothing to close."""


def launcher_pids() -> frozenset[int]:
    """This process's ancestors (read once: a parent does not change while llmtop runs, and
    an orphan's new parent is init, never a build); empty when psutil cannot read them."""
    try:
        return frozenset(p.pid for p in psutil.Process(os.getpid()).parents())
    except psutil.Error:
        return frozenset()


READ_TIMEOUT_S = 2.0  # a full table read takes ~10-50 ms (bench/probe_cost.py); 2 s is a hang


class ProcessProbe:
    """Takes `ProcessSample`s of the whole process table. Not thread-safe.

    self_pids: llmtop's own pids (default: this process); engine_pids: the measured engine's
    (default: none). Either may be a callable, re-read at every sample.
    read_timeout_s: how long one sample may take. A process stuck in the kernel makes reading
    its /proc/<pid>/cmdline block forever; the read runs in a reading thread that stays
    between samples (`readworker.ReadWorker`), and after this long `sample` raises
    ProbeTimeout naming the pid, which later samples skip. That thread is given up (it ends,
    closing its kept stat files, should it wake up) and its partial table discarded; should
    it wake up, its reads only shorten the CPU window of the next reading of the processes
    it touches. The next sample starts a new thread; so does a probe's first sample, and the
    thread ends when the probe is garbage-collected.
    proc_root: the procfs of the Linux fast path (default `default_proc_root()`: /proc on
    Linux, else None and psutil alone).
    """

    def __init__(
        self,
        self_pids: PidSource | None = None,
        engine_pids: PidSource | None = None,
        *,
        read_timeout_s: float = READ_TIMEOUT_S,
        proc_root: str | None = None,
    ) -> None:
        self._self_pids: PidSource = self_pids if self_pids is not None else {os.getpid()}
        self._engine_pids = engine_pids
        self._launchers = launcher_pids()
        self._table: dict[int, Any] = {}  # pid → _Tracked (psutil) or _StatTracked (procfs)
        self._proc_root = proc_root or default_proc_root()
        self._cpus = cpu_capacity(container_limits(), cores=logical_cpus())
        self._samples = 0
        self._timeout_s = read_timeout_s
        self._worker: ReadWorker | None = None  # started at the first sample
        self._retire: Callable[[], Any] = lambda: None
        self.stuck: set[int] = set()  # pids whose reads hung: never read again
        self.last_read_cpu_ns = 0  # CPU time of the last read's worker thread (sample cost)

    def sample(self) -> ProcessSample:
        """Read every process once and group them. Never raises for process races; raises
        ProbeTimeout when the read takes longer than `read_timeout_s`."""
        warming_up = self._samples == 0
        self._samples += 1
        rows = self._bounded_read()
        return group(
            rows,
            self_pids=_pids(self._self_pids),
            engine_pids=_pids(self._engine_pids),
            launcher_pids=self._launchers,
            cpus=self._cpus,
            warming_up=warming_up,
        )

    def _bounded_read(self) -> list[tuple[ProcReading, Identity]]:
        """The table read on a copy of the table in the reading thread (`ReadWorker`),
        waiting at most `read_timeout_s`; the copy replaces the table when the read ends."""
        if self._worker is None:
            files = procstat.StatFiles(self._proc_root) if self._proc_root else _NoFiles()
            self._worker = ReadWorker(files)
            self._retire = weakref.finalize(self, self._worker.retire)
        worker, table = self._worker, dict(self._table)
        read_all = self._read_all if self._proc_root is None else self._read_all_stat
        finished, rows = worker.run(lambda files, cur: list(read_all(table, cur, files)),
                                    self._timeout_s)
        if not finished:
            self._retire()  # the thread ends (and closes its files) when its read returns
            self._worker = None
            pid = worker.current[0]
            if not pid:
                raise ProbeTimeout(f"listing processes took over {self._timeout_s:g} s")
            self.stuck.add(pid)
            raise ProbeTimeout(
                f"reading process {pid} took over {self._timeout_s:g} s (stuck in the "
                "kernel?); it is skipped from now on"
            )
        self.last_read_cpu_ns = worker.cpu_ns
        self._table = table
        return list(rows)

    def _read_all(
        self, table: dict[int, _Tracked], current: list[int], _files: Any = None
    ) -> Iterator[tuple[ProcReading, Identity]]:
        live = set(psutil.pids()) - self.stuck
        live.discard(0)  # pid 0 is the idle task (Windows "System Idle Process", BSD "idle")
        for gone in table.keys() - live:
            del table[gone]
        for pid in sorted(live):
            current[0] = pid
            tracked = self._track(table, pid)
            if tracked is None:
                continue
            reading = read_process(
                tracked.proc, first=tracked.readings == 0, read_name=tracked.name_due()
            )
            if reading is None:
                table.pop(pid, None)
                continue
            tracked.readings += 1
            if reading.name is not None and reading.name != tracked.name:
                tracked.name = reading.name
                tracked.ident = identify(tracked.proc, reading.name)
            yield reading, tracked.ident

    def _read_all_stat(
        self, table: dict[int, Any], current: list[int], files: procstat.StatFiles
    ) -> Iterator[tuple[ProcReading, Identity]]:
        """The Linux fast path: one `/proc/<pid>/stat` read per process (module docstring),
        through the reading thread's kept files."""
        live = set(procstat.list_pids(files.root)) - self.stuck
        live.discard(0)
        for gone in table.keys() - live:
            del table[gone]
            files.forget(gone)
        for pid in sorted(live):
            current[0] = pid
            try:
                st = files.read(pid)
            except procstat.Unreadable:  # a hidepid mount: listed, never readable
                if pid not in table:
                    table[pid] = _StatTracked(-1, "", _identify_pid(pid, None), 0, 0)
                yield ProcReading(pid, None, None, None), table[pid].ident
                continue
            t_ns = time.perf_counter_ns()
            if st is None:
                table.pop(pid, None)
                continue
            tracked = table.get(pid)
            if tracked is None or tracked.start_ticks != st.start_ticks:
                # new, or a recycled pid: identify it; its first CPU reading is unknown
                ident = _identify_pid(pid, st.comm, st.ppid)
                table[pid] = _StatTracked(st.start_ticks, st.comm, ident, st.cpu_ticks, t_ns)
                yield ProcReading(pid, st.comm, None, st.rss_bytes), ident
                continue
            if st.comm != tracked.comm:  # exec: same pid and start time, another program
                tracked.comm, tracked.ident = st.comm, _identify_pid(pid, st.comm, st.ppid)
            yield ProcReading(pid, st.comm, _cpu_percent(tracked, st, t_ns), st.rss_bytes), (
                tracked.ident
            )
            tracked.cpu_ticks, tracked.t_ns = st.cpu_ticks, t_ns

    def _track(self, table: dict[int, _Tracked], pid: int) -> _Tracked | None:
        """The cached entry for `pid`, replaced when the pid was recycled; None if gone."""
        tracked = table.get(pid)
        if tracked is not None:
            # is_running() compares (pid, create_time) with a fresh read: a recycled pid
            # would otherwise inherit the old process's CPU baseline.
            try:
                if tracked.proc.is_running():
                    return tracked
            except psutil.Error:
                pass
        try:
            proc = psutil.Process(pid)
        except psutil.Error:
            table.pop(pid, None)
            return None
        name = _safe_name(proc)
        tracked = _Tracked(proc=proc, ident=identify(proc, name), name=name)
        table[pid] = tracked
        return tracked


def _cpu_percent(tracked: _StatTracked, st: procstat.StatLine, t_ns: int) -> float | None:
    """% of one core between two reads: CPU seconds used / wall seconds elapsed × 100 (the
    formula of psutil's `Process.cpu_percent`); None when no time has passed."""
    elapsed_s = (t_ns - tracked.t_ns) / 1e9
    if elapsed_s <= 0:
        return None
    used_s = (st.cpu_ticks - tracked.cpu_ticks) / procstat.CLK_TCK
    return max(0.0, used_s / elapsed_s * 100.0)


def _identify_pid(pid: int, comm: str | None, ppid: int | None = None) -> Identity:
    """Identify a process once through psutil (name beyond 15 characters, exe, cmdline,
    parent); a process that vanishes meanwhile is named by its command name. A kernel thread
    (`ppid` 2, from the stat line already read) needs no psutil: kernel threads come and go
    every few samples, and psutil's reads cost ~0.2 ms each (bench/probe_cost.py); so does
    kthreadd itself (pid 2, parent 0), their parent."""
    if ppid == 2 or (pid == 2 and ppid == 0):
        return Identity(KERNEL_APP, Category.OTHER)
    try:
        proc = psutil.Process(pid)
        return identify(proc, _safe_name(proc) or comm)
    except psutil.Error:
        return Identity(_group_name(comm), Category.OTHER)


def _safe_name(proc: psutil.Process) -> str | None:
    try:
        return proc.name()
    except psutil.Error:
        return None


@dataclass(frozen=True, slots=True)
class PidDetail:
    """One process of an app as the apps screen (F3) shows it, read on demand.

    program: what it runs as `interpreted_program` names it ("python3 -m llmtop"), else its
    process name — never its arguments (they may hold secrets); user: its owner (None when
    unreadable); started: its start, epoch seconds, for a wall-clock label only; threads:
    its thread count; gone: True when it exited before it could be read."""

    pid: int
    program: str
    user: str | None
    started: float | None
    threads: int | None
    gone: bool = False


def describe_pids(pids: Iterable[int], limit: int = 20) -> list[PidDetail]:
    """A `PidDetail` for each of the first `limit` pids (psutil, one `oneshot()` each: about
    0.1 ms a process). Never raises: a vanished process is `gone`, an unreadable field None."""
    out: list[PidDetail] = []
    for pid in list(pids)[:limit]:
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                name = _field(proc.name)
                cmdline = _field(proc.cmdline)
                program = interpreted_program(name, cmdline) or name or "(unknown)"
                out.append(PidDetail(pid, program, _field(proc.username),
                                     _field(proc.create_time), _field(proc.num_threads)))
        except psutil.NoSuchProcess:
            out.append(PidDetail(pid, "(exited)", None, None, None, gone=True))
    return out
