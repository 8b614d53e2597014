"""Is the machine quiet enough to measure? Sample it for a few seconds and judge the medians.

One probe sample is a snapshot: a compiler that ran for 200 ms, or an idle browser that woke
for one frame, would decide the verdict. Preflight therefore samples over a window (default
3 s every 0.5 s) and judges the *median* of each figure:

* the first sample only primes psutil's CPU counters (a fresh probe has no CPU reading yet);
  it is dropped, as are samples still marked warming up or missing the system/process probe;
* system figures (machine CPU %, memory available, swap, clock) are the medians over the
  remaining samples; llmtop's own and the engine's CPU likewise, so the background CPU is
  median(machine CPU) − median(llmtop + engine CPU) / logical CPUs (`background_cpu_percent`);
* per app (grouped by name and category): the median of its CPU % over the samples, counting
  a sample where it is absent as 0 % (it was not running) and skipping unknown (None)
  readings. The median was chosen over "appears busy in most samples" because it gives one
  number to show against the threshold and, like a majority vote, ignores a busy minority;
* the verdict rules (`verdict.evaluate`) then run once on those medians with the given
  thresholds, so preflight, the probe panel and reports apply the same rules.

Probe errors are not dropped: each distinct error becomes one WARN "probe-error" finding with
how many samples it hit; with no usable sample at all the result has `error` set and its exit
code is CANNOT_CHECK.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import IntEnum
from typing import Any, Protocol

from llmtop.exitcodes import ExitCode
from llmtop.probes.catalogue import Category
from llmtop.probes.engine_identity import EngineIdentity
from llmtop.probes.gpu import GpuDevice, device_dict
from llmtop.probes.processes import AppUsage, PidSource, ProcessSample
from llmtop.probes.sampler import ProbeSample, ProbeSampler
from llmtop.probes.system import SystemSample, machine_percent
from llmtop.probes.verdict import (
    DEFAULT,
    Finding,
    Level,
    Thresholds,
    Verdict,
    background_cpu_percent,
    evaluate,
)

DEFAULT_DURATION_S = 3.0
DEFAULT_INTERVAL_S = 0.5


class PreflightExit(IntEnum):
    """`llmtop preflight`'s exit status; the values are those of `llmtop.exitcodes.ExitCode`."""

    QUIET = int(ExitCode.OK)
    """0: no finding is WARN or FAIL over the window: measure now."""

    NOISY = int(ExitCode.NOISY)
    """1: at least one WARN or FAIL finding: the findings say what and what to do."""

    CANNOT_CHECK = int(ExitCode.USAGE)
    """2: the state could not be checked (bad config file, no usable probe sample, an engine
    that answered but whose /api/ps could not be read); the reason is printed."""


class SamplerLike(Protocol):
    """What preflight needs of `ProbeSampler` (tests pass scripted fakes)."""

    def sample_once(self) -> ProbeSample: ...


@dataclass(frozen=True, slots=True)
class PreflightResult:
    """The verdict over a window.

    quiet: no WARN/FAIL finding (and no error). findings: worst first (`Verdict.of`).
    samples: samples judged (after dropping warm-up and failed ones); taken: all samples.
    duration_s: seconds the window actually lasted (monotonic clock); interval_s: the period.
    background_cpu_median: % of the whole machine used by everything but llmtop and the
        measured engine (median figures, see the module docstring); None when not known.
    apps: every app with its median CPU % (of one core), busiest first.
    background_cpu_band: the lowest and highest background CPU % of a single sample, the
        spread the median hides (a window where a job started half way reads 5 % median,
        0–60 % band); None when no sample had both readings.
    error: why the state could not be checked (then quiet is False and exit is CANNOT_CHECK).
    gpus: every GPU of the window's last GPU reading, any vendor (`gpu.GpuDevice`);
        gpu_reason: why none was found (NVML's reason), None when some were.
    """

    quiet: bool
    findings: tuple[Finding, ...]
    samples: int
    duration_s: float
    background_cpu_median: float | None
    apps: tuple[AppUsage, ...] = ()
    taken: int = 0
    interval_s: float | None = None
    thresholds: Thresholds = DEFAULT
    error: str | None = None
    gpu_present: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    gpus: tuple[GpuDevice, ...] = ()
    gpu_reason: str | None = None
    background_cpu_band: tuple[float, float] | None = None

    @property
    def exit_code(self) -> PreflightExit:
        """QUIET, NOISY, or CANNOT_CHECK when `error` is set."""
        if self.error is not None:
            return PreflightExit.CANNOT_CHECK
        return PreflightExit.QUIET if self.quiet else PreflightExit.NOISY

    @property
    def verdict(self) -> str:
        """"QUIET", "NOISY" or "CANNOT CHECK"."""
        return self.exit_code.name.replace("_", " ")

    def with_findings(self, extra: Iterable[Finding]) -> PreflightResult:
        """The same result with more findings (e.g. the engine's), verdict recomputed."""
        verdict = Verdict.of(self.findings + tuple(extra))
        return replace(self, quiet=verdict.quiet and self.error is None, findings=verdict.findings)

    def to_dict(self, max_apps: int | None = 10) -> dict[str, Any]:
        """JSON-ready dict: verdict, exit code, findings, window, medians, thresholds."""
        apps = self.apps if max_apps is None else self.apps[:max_apps]
        return {
            "verdict": self.verdict,
            "quiet": self.quiet,
            "exit_code": int(self.exit_code),
            "error": self.error,
            "findings": [finding_dict(f) for f in self.findings],
            "samples": self.samples,
            "samples_taken": self.taken,
            "duration_s": round(self.duration_s, 3),
            "interval_s": self.interval_s,
            "background_cpu_median": _round(self.background_cpu_median),
            "background_cpu_band": (None if self.background_cpu_band is None
                                    else [_round(v) for v in self.background_cpu_band]),
            "apps": [
                {
                    "app": a.app,
                    "category": a.category.value,
                    "cpu_percent_median": _round(a.cpu_percent),
                    "n_procs": a.n_procs,
                    "pids": list(a.pids),
                }
                for a in apps
            ],
            "apps_omitted": len(self.apps) - len(apps),
            "thresholds": asdict(self.thresholds),
            "gpus": [device_dict(d) for d in self.gpus],
            "gpu_reason": self.gpu_reason,
            **self.extra,
        }


def finding_dict(f: Finding) -> dict[str, Any]:
    """A finding as a JSON-ready dict (level as its string value)."""
    return {
        "code": f.code,
        "level": f.level.value,
        "value": f.value,
        "threshold": f.threshold,
        "unit": f.unit,
        "message": f.message,
        "remedy": f.remedy,
    }


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def collect_samples(
    duration_s: float = DEFAULT_DURATION_S,
    interval_s: float = DEFAULT_INTERVAL_S,
    engine_pids: PidSource | None = None,
    *,
    sampler: SamplerLike | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[list[ProbeSample], float]:
    """Take 1 + max(1, round(duration_s / interval_s)) samples, `interval_s` apart on a
    deadline schedule; the first only primes the CPU counters and is not returned.

    Returns (samples, seconds the window lasted). Raises ValueError unless both are > 0.
    """
    if not duration_s > 0 or not interval_s > 0:
        raise ValueError(
            f"duration_s and interval_s must be > 0, got {duration_s!r}, {interval_s!r}"
        )
    probe: SamplerLike = sampler or ProbeSampler(interval_s, engine_pids=engine_pids)
    n = max(1, round(duration_s / interval_s))
    t0 = clock()
    probe.sample_once()  # warm-up: CPU % needs two readings
    out = []
    for i in range(1, n + 1):
        left = t0 + i * interval_s - clock()
        if left > 0:
            sleep(left)
        out.append(probe.sample_once())
    return out, clock() - t0


def run_preflight(
    duration_s: float = DEFAULT_DURATION_S,
    interval_s: float = DEFAULT_INTERVAL_S,
    thresholds: Thresholds = DEFAULT,
    engine_pids: PidSource | None = None,
    extra_findings: Iterable[Finding] = (),
    *,
    engine: EngineIdentity | None = None,
    sampler: SamplerLike | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    engine_threads: int | None = None,
) -> PreflightResult:
    """Sample the machine for `duration_s` seconds and judge it (see the module docstring).
    engine_threads: the measured engine's compute threads when known (`verdict.evaluate`).

    engine_pids: the measured engine's pids (kept out of the background figure).
    engine: how the engine was identified (`engine_identity.identify_engine(host, override)`);
        its pids are used when `engine_pids` is None, its INFO finding is added and
        `extra["engine_identity"]` records it.
    extra_findings: added to the verdict (e.g. `engine_state.engine_findings`).
    Blocks for about `duration_s`. Raises ValueError for a non-positive duration or interval.
    """
    if engine is not None:
        engine_pids = engine.pids if engine_pids is None else engine_pids
        extra_findings = (*extra_findings, engine.finding())
    samples, took = collect_samples(
        duration_s, interval_s, engine_pids, sampler=sampler, sleep=sleep, clock=clock
    )
    result = aggregate(
        samples,
        thresholds,
        extra_findings,
        duration_s=took,
        interval_s=interval_s,
        taken=len(samples) + 1,
        engine_threads=engine_threads,
    )
    if engine is None:
        return result
    return replace(result, extra={**result.extra, "engine_identity": engine.to_dict()})


def _usable(s: ProbeSample) -> bool:
    return (
        s.system is not None
        and s.processes is not None
        and s.system.cpu_percent is not None
        and not s.processes.warming_up
    )


def aggregate(
    samples: Sequence[ProbeSample],
    thresholds: Thresholds = DEFAULT,
    extra_findings: Iterable[Finding] = (),
    *,
    duration_s: float = 0.0,
    interval_s: float | None = None,
    taken: int | None = None,
    engine_threads: int | None = None,
) -> PreflightResult:
    """Pure: judge a window of samples on their medians (see the module docstring)."""
    extra = tuple(extra_findings)
    errors = _probe_errors(samples)
    usable = [s for s in samples if _usable(s)]
    gpu_present = _gpu_present(samples)
    last_gpu = next((s.gpu for s in reversed(samples) if s.gpu is not None), None)
    common: dict[str, Any] = {
        "gpus": last_gpu.devices if last_gpu is not None else (),
        "gpu_reason": last_gpu.reason if last_gpu is not None else None,
        "duration_s": duration_s,
        "interval_s": interval_s,
        "taken": len(samples) if taken is None else taken,
        "thresholds": thresholds,
        "gpu_present": gpu_present,
    }
    if not usable:
        why = errors[0].message if errors else "every sample was still warming up"
        verdict = Verdict.of(errors + extra)
        return PreflightResult(
            quiet=False,
            findings=verdict.findings,
            samples=0,
            background_cpu_median=None,
            error=f"no usable probe sample out of {len(samples)}: {why}",
            **common,
        )
    system = median_system([s.system for s in usable if s.system is not None])
    processes = median_processes([s.processes for s in usable if s.processes is not None])
    # the thermal state now, not a median: the last sample's (a Mac's SoC; None elsewhere)
    verdict = Verdict.of(evaluate(system, processes, thresholds, engine_threads,
                                  gpu=usable[-1].gpu).findings + errors + extra)
    return PreflightResult(
        quiet=verdict.quiet,
        findings=verdict.findings,
        samples=len(usable),
        background_cpu_median=background_cpu_percent(system, processes),
        apps=processes.apps,
        background_cpu_band=_band(usable),
        **common,
    )


def _band(samples: Sequence[ProbeSample]) -> tuple[float, float] | None:
    """(min, max) of the per-sample background CPU % (`background_cpu_percent` of each
    sample's own readings); None when no sample has one."""
    values = [background_cpu_percent(s.system, s.processes) for s in samples
              if s.system is not None and s.processes is not None]
    known = [v for v in values if v is not None]
    return (min(known), max(known)) if known else None


def _median(values: Iterable[float | int | None]) -> float | None:
    known = [float(v) for v in values if v is not None]
    return statistics.median(known) if known else None


def median_system(samples: Sequence[SystemSample]) -> SystemSample:
    """Per-field medians of system samples (the last sample's for totals, battery and load;
    per-CPU figures are left empty: a median of cores taken at different times means little).
    Raises ValueError for an empty sequence."""
    if not samples:
        raise ValueError("no system samples")
    last = samples[-1]
    return replace(
        last,
        cpu_percent=_median(s.cpu_percent for s in samples),
        per_cpu=(),
        mem_available=int(_median(s.mem_available for s in samples) or 0),
        mem_percent=_median(s.mem_percent for s in samples) or 0.0,
        swap_used=int(_median(s.swap_used for s in samples) or 0),
        swap_percent=_median(s.swap_percent for s in samples) or 0.0,
        cpu_freq_mhz=_median(s.cpu_freq_mhz for s in samples),
        cpu_freq_max_mhz=_median(s.cpu_freq_max_mhz for s in samples),
    )


def median_processes(samples: Sequence[ProcessSample]) -> ProcessSample:
    """One ProcessSample whose apps carry their median CPU over `samples` (absent = 0 %,
    unknown readings skipped; None when never known), n_procs the most seen, pids the union.
    Raises ValueError for an empty sequence."""
    if not samples:
        raise ValueError("no process samples")
    cpus = samples[-1].logical_cpus
    seen: dict[tuple[str, Category], list[AppUsage]] = {}
    for s in samples:
        for a in s.apps:
            seen.setdefault((a.app, a.category), []).append(a)
    apps = []
    for (name, category), members in seen.items():
        readings: list[float | None] = [a.cpu_percent for a in members]
        readings += [0.0] * _absent(samples, name, category)
        cpu = _median(readings)
        apps.append(
            AppUsage(
                app=name,
                category=category,
                cpu_percent=cpu,
                rss_bytes=_int_or_none(_median(a.rss_bytes for a in members)),
                n_procs=max(a.n_procs for a in members),
                pids=tuple(sorted({p for a in members for p in a.pids})),
                is_browser=category is Category.BROWSER,
                cpu_percent_machine=machine_percent(cpu, cpus),
            )
        )
    apps.sort(
        key=lambda a: (a.cpu_percent is None, -(a.cpu_percent or 0.0), -(a.rss_bytes or 0), a.app)
    )
    engine_known = any(s.engine_cpu_percent is not None for s in samples)
    return ProcessSample(
        apps=tuple(apps),
        self_cpu_percent=_median(s.self_cpu_percent for s in samples),
        engine_cpu_percent=_median(s.engine_cpu_percent for s in samples) if engine_known else None,
        warming_up=False,
        n_procs=int(_median(s.n_procs for s in samples) or 0),
        logical_cpus=cpus,
        engine_identified=any(s.engine_identified for s in samples),
    )


def _absent(samples: Sequence[ProcessSample], name: str, category: Category) -> int:
    return sum(
        1 for s in samples if not any(a.app == name and a.category is category for a in s.apps)
    )


def _int_or_none(value: float | None) -> int | None:
    return None if value is None else int(value)


def _probe_errors(samples: Sequence[ProbeSample]) -> tuple[Finding, ...]:
    """One WARN per distinct probe-error message, saying in how many samples it happened."""
    counts: dict[str, tuple[Finding, int]] = {}
    for s in samples:
        for f in s.verdict.findings:
            if f.code == "probe-error":
                first, k = counts.get(f.message, (f, 0))
                counts[f.message] = (first, k + 1)
    return tuple(
        replace(f, level=Level.WARN, message=f"{f.message} (in {k} of {len(samples)} samples)")
        for f, k in counts.values()
    )


def _gpu_present(samples: Sequence[ProbeSample]) -> bool | None:
    """True when NVML or the kernel's DRM files showed a GPU in any sample; None otherwise
    (seeing none does not mean no GPU: Apple silicon is invisible to both)."""
    for s in samples:
        if s.gpu is not None and s.gpu.available and s.gpu.devices:
            return True
    return None

