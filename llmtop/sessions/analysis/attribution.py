"""Which application was busy while requests were slow? Pure: typed session-log records
(records/schema.py) in, a named culprit (or an honest "nothing stands out") out.

The source's false "thermal throttling" was an open browser tab (docs/method.md, "Quiet machine").
The session log has what is needed to catch that: request records (`id`, `metrics`) and probe
records tagged with the request they overlapped (`ProbeRecord.request_id`, see log.py). This
module compares, per application, its CPU during slow requests with its CPU during fast ones.

Slow requests. Either given (`slow_ids`, e.g. the last-5 window of a drift verdict), or found
with a robust outlier rule on `metric`: a request is slow when its value is worse than the
median by more than k × spread, with

    spread = max(1.4826 × MAD, 1 % of |median|),   k = 2,

MAD being the median absolute deviation from the median (1.4826 × MAD estimates the standard
deviation of normally distributed data; Rousseeuw & Croux 1993). The 1 % floor keeps a run
whose values are mostly identical (MAD 0) from calling a 0.1 % dip slow. The rule assumes slow
requests are a minority: when about half the run is slow (the source's contaminated series),
the median itself sits between the two groups and nothing is flagged — pass `slow_ids` then.
All other counted requests (phase "measure" or none, status "ok" or none) are fast.

Per application (by name; llmtop itself and the measured engine are excluded): the mean of
its CPU % (of one core, psutil semantics) over each request's probe samples — a sample where
the app is absent counts as 0 % (the log keeps the 20 busiest apps: an omitted one was below
them), an unknown reading (None) is skipped — then the mean of those per-request figures
over the slow and over the fast requests. The app with the largest slow − fast difference is
named when that difference exceeds `min_diff` (10 % of one core by default, the same figure
as `Thresholds.app_cpu_warn`). Otherwise no one is named: a suspect is never invented.

Naming the cause of a drift (`name_cause`, docs/method.md, "Naming the cause"): **the
machine itself** when a reading taken over each request moved between the first 5 and the
last 5 (cgroup throttling up by over 1 ms per request, CPU steal up by over 2 points, a CPU
or GPU clock down by over 5 %, a GPU throttle reason new in the last 5): a direct measurement
of the machine taking time from the engine, named before an application whose CPU only
correlates (the app is kept as evidence); else an application when the rule above names one
(a busy app slows the canary too); else the machine itself when the machine-speed canary
drifted by the drift rule (slower, beyond the threshold, the first and last 5 really
different); else **unexplained**: the canary did not count as slower while the engine slowed,
so look at the engine. Its sentence says what the canary did (`canary_said`): held steady
(every part within ± the threshold), ran faster (beyond it, the first and last 5 really
different), or moved but within its own spread (beyond it, the groups overlapping). A
canary slowdown under a third of the engine's is said to explain a part only (a one-thread
canary cannot slow as much as a many-thread engine under the same limit), unless a reading
moved: that reading measures the machine taking the engine's time itself.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from llmtop.engines.events import Status
from llmtop.sessions.measure.metrics import SERVER_DECODE
from llmtop.sessions.measure.stats import DRIFT_THRESHOLD_PCT
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.records.schema import AppCpu, ProbeRecord

MAD_SCALE = 1.4826  # MAD → standard deviation under normality
K_SPREAD = 2.0
SPREAD_FLOOR = 0.01  # spread is at least 1 % of |median|
MIN_DIFF_CPU = 10.0  # % of one core; = verdict.Thresholds.app_cpu_warn's default
EXCLUDED_CATEGORIES = frozenset({"llmtop", "measured engine", "engine"})
NOTHING_STANDS_OUT = "no application's CPU differs between slow and fast requests"


@dataclass(frozen=True, slots=True)
class AppContrast:
    """One application's mean CPU % (of one core) during slow and during fast requests.

    slow_n / fast_n: requests that had probe samples readable for this app.
    diff: slow_mean − fast_mean (None when either side has no request).
    """

    app: str
    slow_mean: float | None
    fast_mean: float | None
    slow_n: int
    fast_n: int

    @property
    def diff(self) -> float | None:
        """slow_mean − fast_mean, % of one core."""
        if self.slow_mean is None or self.fast_mean is None:
            return None
        return self.slow_mean - self.fast_mean

    def evidence(self) -> str:
        """"chromium: 38 % CPU during the 9 slow requests, 1 % during the 14 fast ones"."""
        return (
            f"{self.app}: {self.slow_mean or 0.0:.0f} % CPU during the {self.slow_n} slow "
            f"request{'' if self.slow_n == 1 else 's'}, {self.fast_mean or 0.0:.0f} % during "
            f"the {self.fast_n} fast {'one' if self.fast_n == 1 else 'ones'}"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (means rounded to 0.1)."""
        return {
            "app": self.app,
            "slow_mean_cpu": _r(self.slow_mean),
            "fast_mean_cpu": _r(self.fast_mean),
            "diff_cpu": _r(self.diff),
            "slow_n": self.slow_n,
            "fast_n": self.fast_n,
        }


@dataclass(frozen=True, slots=True)
class Attribution:
    """The result. culprit: the app named (None when nothing stands out or no comparison was
    possible); evidence: one sentence saying why, either way.

    slow_ids / fast_ids: request ids on each side. per_app: every app seen, largest difference
    first. median / spread: the outlier rule's figures in the metric's unit (None when
    `slow_ids` were given).
    """

    culprit: str | None
    evidence: str
    slow_ids: tuple[int, ...]
    fast_ids: tuple[int, ...]
    per_app: tuple[AppContrast, ...]
    metric: str
    higher_is_better: bool
    median: float | None = None
    spread: float | None = None
    min_diff: float = MIN_DIFF_CPU

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field."""
        return {
            "culprit": self.culprit,
            "evidence": self.evidence,
            "metric": self.metric,
            "higher_is_better": self.higher_is_better,
            "median": self.median,
            "spread": self.spread,
            "k": K_SPREAD,
            "min_diff_cpu": self.min_diff,
            "slow_ids": list(self.slow_ids),
            "fast_ids": list(self.fast_ids),
            "per_app": [a.to_dict() for a in self.per_app],
        }


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _counted(rec: RequestRecord) -> bool:
    return rec.measured and rec.status == Status.OK


def robust_slow(
    values: Mapping[int, float], higher_is_better: bool = True, k: float = K_SPREAD
) -> tuple[set[int], float | None, float | None]:
    """Ids whose value is worse than the median by more than k × spread (module docstring).

    Returns (slow ids, median, spread); fewer than 3 values → (empty, median or None, None).
    """
    if not values:
        return set(), None, None
    xs = list(values.values())
    med = statistics.median(xs)
    if len(xs) < 3:
        return set(), med, None
    mad = statistics.median(abs(x - med) for x in xs)
    spread = max(MAD_SCALE * mad, SPREAD_FLOOR * abs(med))
    limit = k * spread
    slow = {
        i for i, x in values.items() if (med - x if higher_is_better else x - med) > limit
    }
    return slow, med, spread


_last_probes: list[Any] = [None, {}]  # the probes last seen and their per-request CPU


def _app_cpu_by_request(probes: Sequence[ProbeRecord]) -> dict[int, dict[str, float | None]]:
    """Each request's per-app CPU (`_request_app_cpu`) from a log's probe samples, found
    once per sequence of samples: a report contrasts the same samples for the run and for
    every episode (21 times in a 100,000-request log), and the last tuple seen (a log's
    records, which cannot change) is kept by identity with its answer."""
    if isinstance(probes, tuple) and _last_probes[0] is probes:  # a tuple cannot change
        found: dict[int, dict[str, float | None]] = _last_probes[1]
        return found
    by_request: dict[int, list[ProbeRecord]] = {}
    for p in probes:
        if p.request_id is not None:
            by_request.setdefault(p.request_id, []).append(p)
    found = {rid: _request_app_cpu(ps) for rid, ps in by_request.items()}
    _last_probes[:] = [probes, found]
    return found


def _request_app_cpu(probes: Iterable[ProbeRecord]) -> dict[str, float | None]:
    """Per app, the mean CPU over one request's probe samples (absent = 0, None skipped;
    None when every reading of a present app was unknown)."""
    usable = [apps for p in probes if (apps := _apps(p)) is not None]
    # per sample, each app's known CPU summed (None: present, nothing known): one pass over
    # a sample's apps, not one per app name (a 100,000-request report made 209,000 calls)
    per_sample: list[dict[str, float | None]] = []
    for apps in usable:
        sums: dict[str, float | None] = {}
        for a in apps:
            before = sums.get(a.app)
            if a.cpu_percent is None:
                sums.setdefault(a.app, None)
            else:
                sums[a.app] = (before or 0.0) + a.cpu_percent
        per_sample.append(sums)
    names = {name for sums in per_sample for name in sums}
    means: dict[str, float | None] = {}
    for name in names:
        readings = []
        for sums in per_sample:
            if name not in sums:
                readings.append(0.0)  # absent from the sample: 0
            elif (value := sums[name]) is not None:
                readings.append(value)
        means[name] = statistics.fmean(readings) if readings else None
    return means


def _apps(probe: ProbeRecord) -> list[AppCpu] | None:
    """The sample's judged apps (llmtop and the engine left out); None when it has no
    usable process reading (the probe failed, or it was warming up)."""
    procs = probe.processes
    if procs is None or procs.warming_up:
        return None
    return [a for a in procs.apps if a.category not in EXCLUDED_CATEGORIES]


@dataclass(frozen=True, slots=True)
class NoisyBusiest:
    """The app busiest while the machine was NOISY: its name, its median CPU (% of one
    core) over the NOISY samples that read it, and how many NOISY samples there were."""

    app: str
    cpu_median: float
    samples: int

    def sentence(self) -> str:
        """"busiest other app in those samples: **hog** (median 99 % of one core in 24 of
        them)"."""
        return (f"busiest other app in those samples: **{self.app}** (median "
                f"{self.cpu_median:.0f} % of one core in {self.samples} of them)")


def noisy_busiest(probes: Iterable[ProbeRecord]) -> NoisyBusiest | None:
    """Who was busy while the probes said NOISY, for a report whose slow-vs-fast contrast
    names no one (a burner running through a whole run slows every request
    alike, so nothing "differs between slow and fast requests", and the text report named no
    program while the TUI and the HTML plot did). The app with the highest median CPU over
    the NOISY samples (an app absent from a sample counts 0 there); llmtop and the engine
    left out. None without NOISY samples or busy apps."""
    noisy = [apps for p in probes if p.noisy and (apps := _apps(p)) is not None]
    if not noisy:
        return None
    names = {a.app for apps in noisy for a in apps if a.cpu_percent}
    medians = {name: statistics.median(
        next((a.cpu_percent or 0.0 for a in apps if a.app == name), 0.0) for apps in noisy)
        for name in names}
    if not medians:
        return None
    top = max(sorted(medians), key=lambda n: medians[n])
    # under 1 % of a core it read "kernel threads (median 0 % …)": no one to name
    return NoisyBusiest(top, medians[top], len(noisy)) if medians[top] >= 1.0 else None


@dataclass(frozen=True)
class _Split:
    """Which counted requests are slow and which fast, with the outlier rule's figures."""

    slow: set[int]
    fast: set[int]
    median: float | None = None
    spread: float | None = None


def _split(
    counted: list[RequestRecord], metric: str, higher_is_better: bool,
    slow_ids: Collection[int] | None, k: float,
) -> _Split:
    if slow_ids is not None:
        ids = {r.id for r in counted}
        slow = ids & set(slow_ids)
        return _Split(slow, ids - slow)
    values = {r.id: v for r in counted if (v := r.metric(metric)) is not None}
    slow, med, spread = robust_slow(values, higher_is_better, k)
    return _Split(slow, set(values) - slow, med, spread)


def _contrasts(probes: Sequence[ProbeRecord], split: _Split) -> tuple[AppContrast, ...] | None:
    """Every app's slow vs fast CPU, largest difference first; None when no probe sample
    overlaps a slow or a fast request."""
    counted = split.slow | split.fast  # once: per sample it made the contrast O(samples × n)
    every = _app_cpu_by_request(probes)
    cpu = {rid: per for rid, per in every.items() if rid in counted}
    slow_seen = [rid for rid in split.slow if rid in cpu]
    fast_seen = [rid for rid in split.fast if rid in cpu]
    if not slow_seen or not fast_seen:
        return None
    contrasts = []
    for name in sorted({name for per in cpu.values() for name in per}):
        s_vals = [v for rid in slow_seen if (v := cpu[rid].get(name, 0.0)) is not None]
        f_vals = [v for rid in fast_seen if (v := cpu[rid].get(name, 0.0)) is not None]
        contrasts.append(AppContrast(name, _mean(s_vals), _mean(f_vals), len(s_vals), len(f_vals)))
    contrasts.sort(key=lambda c: (c.diff is None, -(c.diff or 0.0), c.app))
    return tuple(contrasts)


def _culprit(per_app: tuple[AppContrast, ...], min_diff: float) -> tuple[str | None, str]:
    """(the app named, the evidence): the top app when its difference exceeds `min_diff`
    and no other app ties with it; otherwise no one."""
    top = per_app[0] if per_app else None
    if top is None or top.diff is None or top.diff <= min_diff:
        return None, NOTHING_STANDS_OUT
    if len(per_app) > 1 and per_app[1].diff == top.diff:
        return None, NOTHING_STANDS_OUT + f" alone ({top.app} and {per_app[1].app} tie)"
    return top.app, top.evidence()


def attribute(
    requests: Sequence[RequestRecord],
    probes: Sequence[ProbeRecord],
    metric: str = SERVER_DECODE.key,
    higher_is_better: bool = True,
    *,
    slow_ids: Collection[int] | None = None,
    k: float = K_SPREAD,
    min_diff: float = MIN_DIFF_CPU,
) -> Attribution:
    """Name the application whose CPU was higher during slow requests than fast ones, or say
    that none stands out (see the module docstring for every rule). Never raises for odd
    records: requests without the metric and probes without a process reading are skipped.

    requests: the requests to compare; only the measured ones with status ok count.
    probes: probe records (`request_id`, `processes.apps`).
    metric / higher_is_better: the figure that decides slow, a RequestMetrics field name
    (ignored when `slow_ids` given).
    """
    split = _split([r for r in requests if _counted(r)], metric, higher_is_better, slow_ids, k)

    def result(
        culprit: str | None, evidence: str, per_app: tuple[AppContrast, ...] = ()
    ) -> Attribution:
        return Attribution(
            culprit, evidence, tuple(sorted(split.slow)), tuple(sorted(split.fast)), per_app,
            metric, higher_is_better, split.median, split.spread, min_diff,
        )

    if not split.slow:
        if slow_ids is not None:
            return result(None, "none of the given slow requests is among the counted requests")
        return result(
            None, f"no slow requests: every {metric} is within {k:g} × spread of the median"
        )
    if not split.fast:
        return result(None, "every request is slow: there are no fast requests to compare with")
    per_app = _contrasts(probes, split)
    if per_app is None:
        return result(
            None, "no probe samples overlap the slow or the fast requests: cannot attribute"
        )
    return result(*_culprit(per_app, min_diff), per_app)


# When a reading moved enough between the first 5 and the last 5 requests to name it:
STEAL_RISE_POINTS = 2.0  # CPU steal up by over 2 % of all CPU time
CLOCK_FALL = 0.05  # a clock down by over 5 % (the drift threshold's default)
THROTTLE_RISE_MS = 1.0  # cgroup throttling up by over 1 ms per request
PARTLY = 1 / 3  # a canary slowdown under a third of the engine's explains only a part
GENERIC_MACHINE = "CPU frequency, thermal limits or a virtual machine's neighbours"
LOOK_AT_ENGINE = "look at the engine — its cache, its GPU, its own state"
# Quiet-machine runs on a 2-core VM (bench/false_alarms.py, 10 runs) slowed in episodes that
# came and went across runs of one engine whose memory stayed flat, with steal 0, a fixed
# clock and no throttling: a host's other tenants, which no reading inside a VM sees.
LOOK_BEYOND = ("; on a virtual machine, also its host: other tenants can slow the engine "
               "without any reading inside the VM moving")


class CauseKind(StrEnum):
    """Who slowed a drifted run: an application, the machine itself, or no one found."""

    APP = "app"
    MACHINE = "machine"
    UNEXPLAINED = "unexplained"


@dataclass(frozen=True, slots=True)
class EngineSlowdown:
    """The engine's drift that needs a cause: the metric (key and label) and how much slower
    the engine ran in the last 5 requests than in the first 5, % of time (a rate that fell
    from 22 to 15.2 tok/s is 44.7 % slower: 22 / 15.2 − 1)."""

    metric: str
    label: str
    slower_pct: float


@dataclass(frozen=True, slots=True)
class CanaryPart:
    """One canary part over the run: its label ("CPU loop"), the change of its last-5 median
    over its first-5 median, % of time (+: slower); counted: the drift rule counted that
    change as a slowdown; significant: the first and last 5 really differ in the change's
    direction (the one-sided rank test, p < stats.DRIFT_ALPHA)."""

    label: str
    change_pct: float
    counted: bool = False
    significant: bool = False


@dataclass(frozen=True, slots=True)
class MachineEvidence:
    """What the machine did over the same requests.

    canary: every canary part the log has (empty: no canary in the log). readings: per
    machine.READINGS key, (first-5 median, last-5 median), None where unknown. gpu_reasons:
    GPU throttle reasons seen in the last 5 requests but not the first 5. threshold_pct: the
    run's drift threshold, % (a canary part within ± it held steady). throttles: the thermal
    limits and power caps the slow requests saw and the fast ones did not, as (phrase, where)
    ("the CPU was at its thermal limit", "thermal_zone1 x86_pkg_temp: 97.0 °C >= passive
    trip 95.0 °C"), NVML's reasons left to `gpu_reasons`.
    """

    canary: tuple[CanaryPart, ...] = ()
    readings: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    gpu_reasons: tuple[str, ...] = ()
    threshold_pct: float = DRIFT_THRESHOLD_PCT
    throttles: tuple[tuple[str, str], ...] = ()

    @property
    def canary_slowed(self) -> CanaryPart | None:
        """The part whose slowdown the drift rule counted, the largest one; None if none."""
        return max((p for p in self.canary if p.counted), key=lambda p: p.change_pct,
                   default=None)


@dataclass(frozen=True, slots=True)
class Cause:
    """A drift's cause: kind, one sentence for the verdict, and the evidence lines."""

    kind: CauseKind
    summary: str
    evidence: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"kind": str(self.kind), "summary": self.summary, "evidence": list(self.evidence)}


def _moved(machine: MachineEvidence) -> list[str]:
    """The readings that moved enough to name, as phrases ("CPU steal rose 0.1 → 9.8 %")."""
    def pair(key: str) -> tuple[float, float] | None:
        a, b = machine.readings.get(key, (None, None))
        return None if a is None or b is None else (a, b)

    out = []
    if (t := pair("throttled_ms")) and t[1] - t[0] > THROTTLE_RISE_MS:
        out.append(
            f"the cgroup's CPU quota throttled it ({t[0]:.0f} → {t[1]:.0f} ms per request)"
        )
    if (st := pair("steal_pct")) and st[1] - st[0] > STEAL_RISE_POINTS:
        out.append(
            f"a virtual machine's neighbours took the CPU (steal {st[0]:.1f} → {st[1]:.1f} %)"
        )
    if (f := pair("cpu_mhz")) and f[1] < (1 - CLOCK_FALL) * f[0]:
        out.append(
            f"the CPU clock fell ({f[0]:.0f} → {f[1]:.0f} MHz: frequency or thermal limit)"
        )
    gpu = pair("gpu_mhz")
    if (gpu and gpu[1] < (1 - CLOCK_FALL) * gpu[0]) or machine.gpu_reasons:
        clocks = f" {gpu[0]:.0f} → {gpu[1]:.0f} MHz" if gpu else ""
        why = f" ({', '.join(machine.gpu_reasons)})" if machine.gpu_reasons else ""
        out.append(f"the GPU's clocks fell{clocks}{why}")
    out += [f"{phrase} ({where})" for phrase, where in machine.throttles]
    return out


def name_cause(
    attribution: Attribution, engine: EngineSlowdown, machine: MachineEvidence,
    when: str = "in the second half",
) -> Cause:
    """Name who slowed a drifted run (the rule in the module docstring). Pure; never raises.
    when: the slow requests as the sentence names them ("during requests 7–12" for a slow
    episode, episode_causes.py)."""
    # a negative "slower" is a speed-up (an episode of faster requests): said as such
    slowed = (f"the engine's {engine.label} ran {engine.slower_pct:.0f} % slower"
              if engine.slower_pct >= 0 else
              f"the engine's {engine.label} ran {-engine.slower_pct:.0f} % faster")
    moved = _moved(machine)
    app = attribution.culprit
    if app is not None and not moved:  # a busy app also explains a slower canary
        return Cause(CauseKind.APP, f"{app} was busy while the requests were "
                     f"slow: {attribution.evidence}", (slowed,))
    slowed_part = machine.canary_slowed
    if slowed_part is not None or moved:
        which = "; ".join(moved) if moved else GENERIC_MACHINE
        ran = (f"the machine ran {slowed_part.change_pct:.0f} % slower {when} "
               f"(canary: {slowed_part.label})" if slowed_part else "the machine slowed")
        summary = f"{ran}; no program explains it — {which}"
        # A reading that moved measures the machine taking the engine's time directly; the
        # canary's smaller slowdown is then no sign of a second cause (a quota slows a
        # many-thread engine far more than a few-ms canary).
        partly = slowed_part is not None and slowed_part.change_pct < PARTLY * engine.slower_pct
        if partly and not moved:
            summary += f"; that is a part of the engine's slowdown only: {LOOK_AT_ENGINE}"
        also = f"also busier: {attribution.evidence}" if app else NOTHING_STANDS_OUT
        return Cause(CauseKind.MACHINE, summary, (slowed, also))
    if not machine.canary:
        return Cause(CauseKind.UNEXPLAINED, "no program explains it, and the log has no "
                     "machine-speed canary to tell the machine from the engine", (slowed,))
    said = f"{canary_said(machine)} while {slowed}: {LOOK_AT_ENGINE}{LOOK_BEYOND}"
    return Cause(CauseKind.UNEXPLAINED, said, (NOTHING_STANDS_OUT,))


def canary_said(machine: MachineEvidence) -> str:
    """What a canary that did not count as slower says, from its parts' changes against the
    run's threshold t: every part within ± t → the machine held steady; a part beyond ± t
    whose first and last 5 do not really differ → it moved, but within its own spread (the
    largest such change named); else the parts beyond ± t all got faster for sure → the
    machine did not slow. Needs machine.canary."""
    t = machine.threshold_pct
    parts = ", ".join(f"{p.label} {p.change_pct:+.0f} %" for p in machine.canary)
    beyond = [p for p in machine.canary if abs(p.change_pct) > t]
    if not beyond:
        return f"the machine held steady (canary: {parts})"
    noisy = [p for p in beyond if not p.significant]
    if noisy:
        top = max(noisy, key=lambda p: abs(p.change_pct))
        return (f"the canary moved ({top.label} {top.change_pct:+.0f} %) but within its own "
                "spread, so it cannot say the machine slowed,")
    return f"the canary ran faster ({parts}), so the machine did not slow,"
