"""Findings about the machine → QUIET or NOISY. Pure: plain samples in, plain findings out.

A `Finding` carries its remedy (docs/architecture.md, "Findings carry their remedy"; cf. pyperf
and hyperfine's warnings); the probe panel, `preflight` and reports render the same findings.
Thresholds live in `Thresholds`, each with the source it comes from.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from llmtop.probes.catalogue import Category

if TYPE_CHECKING:  # the samplers' modules import psutil (~50 ms): the TUI's first frame and
    # the config read (`Thresholds`) need only the plain findings below
    from llmtop.probes.gpu import GpuSample
    from llmtop.probes.processes import AppUsage, ProcessSample
    from llmtop.probes.system import SystemSample


class Level(StrEnum):
    """How bad a finding is: INFO (recorded, harmless), WARN (run is suspect), FAIL (do not
    trust the run). `severity` orders them."""

    INFO = "info"
    WARN = "warn"
    FAIL = "fail"

    @property
    def severity(self) -> int:
        """0 INFO, 1 WARN, 2 FAIL."""
        return ("info", "warn", "fail").index(self.value)


@dataclass(frozen=True, slots=True)
class Finding:
    """One observation: `value` compared with `threshold`, both in `unit`.

    code: stable kebab-case id ("browser-busy"); message: what was seen, for people;
    remedy: what to do about it. value/threshold are None when the finding has no number.
    """

    code: str
    level: Level
    value: float | None
    threshold: float | None
    unit: str
    message: str
    remedy: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """QUIET (`quiet=True`) when no finding is WARN or FAIL; findings worst first."""

    quiet: bool
    findings: tuple[Finding, ...]

    @property
    def worst(self) -> Level | None:
        """The worst level among the findings, None when there are none."""
        return max((f.level for f in self.findings), key=lambda lv: lv.severity, default=None)

    @classmethod
    def of(cls, findings: list[Finding] | tuple[Finding, ...]) -> Verdict:
        """Sort findings worst first (stable) and decide quiet."""
        ordered = tuple(sorted(findings, key=lambda f: -f.level.severity))
        return cls(quiet=all(f.level is Level.INFO for f in ordered), findings=ordered)


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Where each default comes from.

    background_cpu_warn/fail (% of the whole machine, after removing llmtop and the engine):
        25 / 50. Stricter than glances' CPU alert levels (careful 50, warning 70, critical
        90 %), which flag an overloaded machine; a latency run is disturbed long before that.
    app_cpu_warn (% of one core): 10 — one app steadily above a tenth of a core is doing work
        (a busy tab, an indexer), not idling; the source's contaminated run was one browser
        tab. app_cpu_fail: 100 — it takes a whole core.
    mem_available_warn/fail (% of total still available): 10 / 5 — 10 % available is glances'
        memory "critical" (90 % used); below 5 % the kernel starts reclaiming or swapping.
    swap_used_warn (% of swap in use): 25 — pages in swap mean memory pressure happened; a
        model or app page-faulting from disk ruins latency figures.
    freq_ratio_warn: 0.5 — current clock below half the maximum. Idle CPUs down-clock to save
        power, so this is only WARN while the machine is busy (>= freq_busy_cpu %), else INFO.
    Battery: pyperf's system check warns when not on AC power (laptops clock down on battery).
    steal_warn (% of CPU time taken by the hypervisor for other guests): 5 — Brendan Gregg's
        USE method counts steal as CPU saturation of the host; llmtop warns once it is a
        twentieth of the time, the same order as the 5 % drift that contaminates a run.
    swap_io_warn_bps (bytes/s swapped in or out): 1 MiB/s — paging while measuring means a
        request may wait on the disk; a few KiB/s of housekeeping is ignored.
    Temperature: a sensor at or above its own "high" mark (the driver's threshold) is WARN.
    """

    background_cpu_warn: float = 25.0
    background_cpu_fail: float = 50.0
    app_cpu_warn: float = 10.0
    app_cpu_fail: float = 100.0
    mem_available_warn: float = 10.0
    mem_available_fail: float = 5.0
    swap_used_warn: float = 25.0
    freq_ratio_warn: float = 0.5
    freq_busy_cpu: float = 25.0
    steal_warn: float = 5.0
    swap_io_warn_bps: float = 1024.0 * 1024.0


DEFAULT = Thresholds()

# What to do about a busy app, by category (data, not branches).
REMEDIES: dict[Category, str] = {
    Category.BROWSER: "close the browser or its busy tabs",
    Category.CHAT: "quit the chat or call app (or end the call) while measuring",
    Category.IDE: "close the IDE or wait for its indexing to finish",
    Category.BUILD: "wait for the build to finish",
    Category.SYNC: "pause syncing, backup or search indexing until the run ends",
    Category.INFERENCE: "stop the other inference engine: it competes for CPU, memory and GPU",
    Category.OTHER: "close or pause it while measuring",
}

_JUDGED_OUT = (Category.SELF, Category.ENGINE)

REMEDY_UNIDENTIFIED = (
    "pass the engine's pid with --engine-pid PID (or `[engine] pids = [PID]` in the config file)"
    " so its CPU is not counted as background"
)
"""What to do when the measured engine's processes were not identified (never "stop it")."""


def evaluate(
    system: SystemSample, processes: ProcessSample, thresholds: Thresholds = DEFAULT,
    engine_threads: int | None = None, thread_setting: str | None = None,
    gpu: GpuSample | None = None,
) -> Verdict:
    """Apply every rule; QUIET when nothing is WARN or FAIL. engine_threads: the measured
    engine's compute threads when known (the embedded engine's, or the request's
    num_thread), so a remedy does not advise the count the engine already runs.
    thread_setting: how this engine is given N threads, a format string with {n} (None:
    llmtop's own `--num-thread {n}`, THREAD_FLAG; `llmtop watch` sends no request of its
    own and an OpenAI-API server takes no thread count, so they say their engine's way).
    gpu: the sample's GPU reading, for the machine's thermal pressure (`_thermal`).

    While warming up (no CPU reading yet) CPU rules are skipped and an INFO "warming-up"
    finding says so, so a first sample is never judged on fake zeros.
    """
    t = thresholds
    findings: list[Finding] = []
    if system.cpu_percent is None or processes.warming_up:
        findings.append(
            Finding(
                "warming-up",
                Level.INFO,
                None,
                None,
                "",
                "CPU figures need a second sample",
                "wait one sampling interval",
            )
        )
    else:
        findings += _background_cpu(system, processes, t, engine_threads, thread_setting)
        findings += _busy_apps(processes, t)
    findings += _memory(system, t)
    findings += _battery(system)
    findings += _thermal(gpu)
    findings += _frequency(system, t)
    findings += _vm_and_paging(system, t)
    findings += _other_engines(processes)
    findings += _container(system)
    return Verdict.of(findings)


def background_cpu_percent(system: SystemSample, processes: ProcessSample) -> float | None:
    """Machine CPU % not spent by llmtop or the engine, 0–100 % of the whole machine.

    total − (self + engine) / logical CPUs, floored at 0 (the two readings cover slightly
    different windows). None while warming up.
    """
    if system.cpu_percent is None:
        return None
    from llmtop.probes.system import machine_percent  # loaded by then: `system` is its sample

    cpus = system.logical_cpus or processes.logical_cpus
    ours = (processes.self_cpu_percent or 0.0) + (processes.engine_cpu_percent or 0.0)
    return max(0.0, system.cpu_percent - (machine_percent(ours, cpus) or 0.0))


# The share of the background CPU that no process accounts for, above which the finding says
# so (and its size): processes that lived between two samples, other users' processes on a
# system that hides them, a container's neighbours. Below it, the two readings' different
# windows explain the gap (44 % said while the listed apps added up to 6 % of a core).
UNATTRIBUTED_SHARE = 1 / 3
UNATTRIBUTED_MIN_PERCENT = 10.0  # % of the machine


def unattributed_cpu_percent(system: SystemSample, processes: ProcessSample) -> float | None:
    """The background CPU (`background_cpu_percent`) that no process read in the sample
    accounts for, % of the machine, floored at 0; None while warming up."""
    background = background_cpu_percent(system, processes)
    if background is None:
        return None
    from llmtop.probes.system import machine_percent  # loaded by then: `system` is its sample

    cpus = system.logical_cpus or processes.logical_cpus
    listed = sum(a.cpu_percent_machine if a.cpu_percent_machine is not None
                 else machine_percent(a.cpu_percent, cpus) or 0.0
                 for a in processes.apps if a.category not in (Category.SELF, Category.ENGINE))
    return max(0.0, background - listed)


def _background_cpu(system: SystemSample, processes: ProcessSample, t: Thresholds,
                    engine_threads: int | None = None,
                    thread_setting: str | None = None) -> list[Finding]:
    value = background_cpu_percent(system, processes)
    if value is None or value <= t.background_cpu_warn:
        return []
    if processes.engine_identified and processes.engine_cpu_percent is None:
        # the engine's processes were found but none has a CPU figure yet (just started:
        # a process's CPU is known from its second reading): the "other programs" figure
        # would hold the engine's own start-up (91 % said
        # "other programs" while the engine llmtop had just started used 80 % of it)
        return [Finding("background-cpu-unknown", Level.INFO, None, None, "",
                        "the engine's CPU is not known yet (its processes just started), so "
                        "the other programs' share is not judged in this sample",
                        "wait one sampling interval")]
    fail = value > t.background_cpu_fail
    maybe = ", ".join(a.app for a in _unidentified_engines(processes) if a.cpu_percent)
    note = f" (this includes {maybe}, which may be the measured engine)" if maybe else ""
    hidden = unattributed_cpu_percent(system, processes) or 0.0
    # a process seen for the first time has no CPU reading yet (psutil needs two): its CPU
    # is in `hidden` for one sample. Named as such, not as unreadable (else a
    # burner just started was "in no process llmtop could read" while the panel named it)
    new = [a.app for a in processes.apps
           if a.cpu_percent is None and a.category not in (Category.SELF, Category.ENGINE)]
    if hidden >= UNATTRIBUTED_MIN_PERCENT and hidden >= UNATTRIBUTED_SHARE * value:
        if new:
            note += (f"; {hidden:.0f} % of it is not in any app's figure yet: "
                     f"{', '.join(new[:NAMED_APPS])} started since the last sample (a new "
                     "process's CPU is known from its second reading)")
        else:
            note += (f"; {hidden:.0f} % of it is in no process llmtop could read (short-lived "
                     "processes, or other users' processes hidden from it)")
    return [
        Finding(
            "background-cpu",
            Level.FAIL if fail else Level.WARN,
            round(value, 1),
            t.background_cpu_fail if fail else t.background_cpu_warn,
            "% CPU (machine)",
            f"other programs are using {value:.0f} % of the machine's CPU{note}",
            _close_remedy(processes)
            + _few_cores_remedy(system.logical_cpus or processes.logical_cpus, engine_threads,
                                thread_setting)
            + (f"; {REMEDY_UNIDENTIFIED}" if maybe else ""),
        )
    ]


NAMED_APPS = 3  # the remedy names the busiest few apps, wherever the finding is shown
NAMED_MIN_PERCENT = 5.0  # % of one core: an app below it is not worth closing


def _close_remedy(processes: ProcessSample) -> str:
    """What to close, by name: "close the busiest applications before measuring (hog 200 %,
    slack 12 % of one core)" — the finding travels to outputs that list no apps (`run`'s
    text and JSON, reports), so "the applications listed below" named nothing there.
    When no readable app is busy but inference engines llmtop could not tell from the
    measured one: stop those not measured (never "close" the measured engine). When nothing
    readable is busy: find what is (another user's processes)."""
    busy = [a for a in processes.apps
            if a.category not in _JUDGED_OUT and a.cpu_percent is not None
            and a.cpu_percent >= NAMED_MIN_PERCENT
            and not (a.category is Category.INFERENCE and not processes.engine_identified)]
    if not busy:
        engines = [a for a in _unidentified_engines(processes)
                   if a.cpu_percent is not None and a.cpu_percent >= NAMED_MIN_PERCENT]
        if engines:  # the busy programs are inference engines, one of them maybe the measured
            named = ", ".join(f"{a.app} {a.cpu_percent:.0f} %" for a in engines[:NAMED_APPS])
            return ("stop the inference engines you are not measuring before measuring "
                    f"({named} of one core)")
        return ("find what is using the CPU before measuring (no process llmtop can read is "
                "busy: look for other users' processes, e.g. with `top` as root)")
    named = ", ".join(f"{a.app} {a.cpu_percent:.0f} %" for a in busy[:NAMED_APPS])
    return f"close the busiest applications before measuring ({named} of one core)"


# On this many logical CPUs or fewer, one busy program takes a core llama.cpp's threads all
# wait on: with as many threads as cores, every decode step waits for the thread that lost
# its core (measured on 2 cores: 11 tok/s fell to 0.2 chunk/s under one busy process).
FEW_CORES = 4


THREAD_FLAG = "--num-thread {n}"  # llmtop's own runs: the flag sets the requests' num_thread


def _few_cores_remedy(cpus: float, engine_threads: int | None = None,
                      thread_setting: str | None = None) -> str:
    """The remedy's tail on a small machine: give the engine one thread fewer than the cores
    ("" above FEW_CORES logical CPUs, when the count is unknown, or when the engine already
    runs fewer threads than the cores: telling an engine on 1 thread `--num-thread 1` is
    no remedy), said as `thread_setting` says it (default THREAD_FLAG)."""
    n = int(cpus)
    if not 2 <= n <= FEW_CORES:
        return ""
    if engine_threads is not None and engine_threads < n:
        return ""
    how = (thread_setting or THREAD_FLAG).replace("{n}", str(n - 1))
    return (f"; on {n} CPUs an engine with a thread per core stalls when another program "
            f"takes one (decode can fall tenfold): {how} leaves it room")


def _unidentified_engines(processes: ProcessSample) -> list[AppUsage]:
    """Inference engines that may be the measured one: its own pids were not identified."""
    if processes.engine_identified:
        return []
    return [a for a in processes.apps if a.category is Category.INFERENCE]


def _busy_apps(processes: ProcessSample, t: Thresholds) -> list[Finding]:
    out = []
    for app in processes.apps:
        if app.category in _JUDGED_OUT or app.cpu_percent is None:
            continue
        if app.category is Category.INFERENCE and not processes.engine_identified:
            continue  # may be the measured engine: `_other_engines` says so, never "stop it"
        if app.cpu_percent <= t.app_cpu_warn:
            continue
        fail = app.cpu_percent > t.app_cpu_fail
        out.append(
            Finding(
                "browser-busy" if app.is_browser else "app-busy",
                Level.FAIL if fail else Level.WARN,
                round(app.cpu_percent, 1),
                t.app_cpu_fail if fail else t.app_cpu_warn,
                "% CPU",
                f"{_who(app)} is using {app.cpu_percent:.0f} % CPU",
                REMEDIES.get(app.category, REMEDIES[Category.OTHER]),
            )
        )
    return out


def _who(app: AppUsage) -> str:
    return f"{app.app} ({app.n_procs} processes)" if app.n_procs > 1 else app.app


def _memory(system: SystemSample, t: Thresholds) -> list[Finding]:
    out = []
    if system.mem_total > 0:
        avail = 100.0 * system.mem_available / system.mem_total
        if avail < t.mem_available_warn:
            fail = avail < t.mem_available_fail
            out.append(
                Finding(
                    "memory-low",
                    Level.FAIL if fail else Level.WARN,
                    round(avail, 1),
                    t.mem_available_fail if fail else t.mem_available_warn,
                    "% memory available",
                    f"only {avail:.0f} % of memory is available",
                    "close memory-hungry applications or use a smaller model",
                )
            )
    if system.swap_total > 0 and system.swap_percent > t.swap_used_warn:
        out.append(
            Finding(
                "swap-used",
                Level.WARN,
                round(system.swap_percent, 1),
                t.swap_used_warn,
                "% swap used",
                f"{system.swap_percent:.0f} % of swap is in use",
                "free memory (close applications) so nothing pages while measuring",
            )
        )
    return out


def _battery(system: SystemSample) -> list[Finding]:
    if system.on_battery is not True:
        return []
    return [
        Finding(
            "on-battery",
            Level.WARN,
            None,
            None,
            "",
            "the machine is running on battery (CPU and GPU clocks may be lowered)",
            "plug in the power cable",
        )
    ]


THERMAL_LEVELS = {"fair": Level.WARN, "serious": Level.FAIL, "critical": Level.FAIL}


def _thermal(gpu: GpuSample | None) -> list[Finding]:
    """The machine's thermal pressure where a GPU device reads it (Apple Silicon's SoC): fair
    is a WARN (the OS starts to hold back), serious or critical a FAIL (clocks are cut, so a
    request measures the cooling, not the engine). Nominal or unread: nothing."""
    states = [d.thermal_state for d in (gpu.devices if gpu is not None else ())
              if d.thermal_state in THERMAL_LEVELS]
    if not states:
        return []
    worst = max(states, key=list(THERMAL_LEVELS).index)
    return [Finding("thermal-pressure", THERMAL_LEVELS[worst], None, None, "",
                    f"thermal pressure {worst}: clocks cut",
                    "let the machine cool before measuring; give it air (lid open, off soft "
                    "surfaces)")]


def _frequency(system: SystemSample, t: Thresholds) -> list[Finding]:
    cur, top = system.cpu_freq_mhz, system.cpu_freq_max_mhz
    if cur is None or top is None or top <= 0:
        return []
    ratio = cur / top
    if ratio >= t.freq_ratio_warn:
        return []
    busy = system.cpu_percent is not None and system.cpu_percent >= t.freq_busy_cpu
    return [
        Finding(
            "cpu-slow",
            Level.WARN if busy else Level.INFO,
            round(100.0 * ratio, 1),
            100.0 * t.freq_ratio_warn,
            "% of max clock",
            f"CPU clock is {cur:.0f} MHz, {100 * ratio:.0f} % of its {top:.0f} MHz maximum"
            + ("" if busy else " (idle: likely power saving)"),
            "check cooling and the power profile (thermal or power throttling)",
        )
    ]


def _vm_and_paging(system: SystemSample, t: Thresholds) -> list[Finding]:
    """CPU steal (a VM's neighbours), swap traffic, and a sensor over its own high mark."""
    out = []
    if system.steal_percent is not None and system.steal_percent > t.steal_warn:
        out.append(
            Finding(
                "cpu-steal",
                Level.WARN,
                round(system.steal_percent, 1),
                t.steal_warn,
                "% CPU time",
                f"the hypervisor gave {system.steal_percent:.0f} % of this VM's CPU time to other "
                "guests",
                "measure on a dedicated host or at a quieter time; steal cannot be fixed from "
                "inside the VM",
            )
        )
    swapping = max(system.swap_in_bps or 0.0, system.swap_out_bps or 0.0)
    if swapping > t.swap_io_warn_bps:
        out.append(
            Finding(
                "swapping",
                Level.WARN,
                round(swapping / 1024 / 1024, 2),
                t.swap_io_warn_bps / 1024 / 1024,
                "MiB/s",
                f"the machine is paging to swap at {swapping / 1024 / 1024:.1f} MiB/s",
                "free memory: close large applications or use a smaller model",
            )
        )
    temp, high = system.temperature_c, system.temperature_high_c
    if temp is not None and high is not None and temp >= high:
        out.append(Finding(
            "hot", Level.WARN, round(temp, 1), high, "°C",
            f"a sensor reads {temp:.0f} °C, at or above its high mark of {high:.0f} °C",
            "let the machine cool down and check its fans; hot CPUs clock down",
        ))
    return out


def _other_engines(processes: ProcessSample) -> list[Finding]:
    if not processes.engine_identified:
        return [
            Finding(
                "possible-engine",
                Level.INFO,
                app.cpu_percent,
                None,
                "% CPU",
                f"an inference engine is running: {_who(app)}; it may be the measured engine,"
                " whose processes were not identified (its CPU is counted as background)",
                REMEDY_UNIDENTIFIED,
            )
            for app in processes.apps
            if app.category is Category.INFERENCE
        ]
    return [
        Finding(
            "other-engine",
            Level.INFO,
            app.cpu_percent,
            None,
            "% CPU",
            f"another inference engine is running: {_who(app)}",
            "stop it if it holds a model in memory or on the GPU",
        )
        for app in processes.apps
        if app.category is Category.INFERENCE
    ]


def _container(system: SystemSample) -> list[Finding]:
    """INFO: the cgroup limits the percentages are relative to, and limits that could not be
    read (then the host's size is used, and the finding says so)."""
    out = []
    cpus, mem = system.cpu_quota, system.memory_limit
    if cpus is not None or mem is not None:
        parts = [f"{cpus:.1f} CPUs" if cpus is not None else "no CPU quota"]
        parts.append(
            f"memory limit {mem / 1024**3:.3g} GiB" if mem is not None else "no memory limit"
        )
        out.append(Finding(
            "container-limits", Level.INFO, cpus, None, "CPUs",
            f"running under cgroup limits ({', '.join(parts)}): CPU and memory figures are"
            " percentages of these limits, not of the host",
            "nothing to do",
        ))
    for problem in system.limit_problems:
        out.append(Finding(
            "container-limits-unknown", Level.INFO, None, None, "",
            f"a container limit could not be read ({problem}): figures use the host's size"
            " for it",
            "nothing to do; if llmtop runs in a container, report this with the file's content",
        ))
    return out
