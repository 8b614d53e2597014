"""The machine's own series beside the engine's (pure): the canary's times and the readings
taken over each request, one value per request, in request order.

The canary (probes/canary.py) runs right before each measured request, so the canary of a
request is the one logged with `before_request` equal to its id; the readings (CPU steal,
clocks, cgroup throttling, GPU clocks) are the request's own `machine` field. Analysis puts
these series next to the metrics' and judges the canary's drift by the same rule
(stats.drift); the readings are evidence, shown as first-5 → last-5 medians.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from llmtop.sessions.records.request import RequestRecord, ThrottleRecord
from llmtop.sessions.records.schema import CanaryRecord, FindingRecord, ProbeRecord

# The machine's series beside the request's metrics (measure/metrics.py): (series key, label,
# unit, higher_is_better); they are no request's fields, so they stay out of the metric table.
CANARY_METRICS: tuple[tuple[str, str, str, bool], ...] = (
    ("canary_cpu_ms", "canary: CPU loop", "ms", False),
    ("canary_mem_ms", "canary: memory stride", "ms", False),
    ("canary_simd_ms", "canary: SIMD on every core", "ms", False),
)
READINGS: tuple[tuple[str, str, str, bool], ...] = (
    ("steal_pct", "CPU steal", "%", False),
    ("cpu_mhz", "CPU clock (mean of cores)", "MHz", True),
    ("throttled_ms", "cgroup CPU throttling", "ms", False),
    ("gpu_mhz", "GPU graphics clock", "MHz", True),
)


def _mean(values: Iterable[float | int | None]) -> float | None:
    known = [float(v) for v in values if v is not None]
    return statistics.fmean(known) if known else None


def reading(rec: RequestRecord, key: str) -> float | None:
    """One request's reading by READINGS key (None: not recorded, e.g. an older log).
    cpu_mhz: mean over the cores; gpu_mhz: mean graphics clock over the GPUs."""
    m = rec.machine
    if m is None:
        return None
    if key == "steal_pct":
        return m.steal_percent
    if key == "cpu_mhz":
        return _mean(m.freq_mhz)
    if key == "throttled_ms":
        return m.throttled_ms
    if key == "gpu_mhz":
        return _mean(g.graphics_mhz for g in m.gpu)
    raise KeyError(key)


def gpu_reasons(recs: Sequence[RequestRecord]) -> set[str]:
    """Every GPU throttle reason the requests ended with, but "gpu_idle" (a GPU between
    kernels is idle, not slowed)."""
    return {
        reason
        for r in recs if r.machine is not None
        for g in r.machine.gpu
        for reason in g.throttle_reasons or ()
        if reason != "gpu_idle"
    }


def throttles(recs: Sequence[RequestRecord]) -> dict[str, ThrottleRecord]:
    """Every throttle the requests saw at their edges, by how it is said ("the GPU was
    power-capped") → the first one seen; NVML's reasons included. Keyed by the phrase, so a
    slow stretch names a throttle only when the fast requests did not have it too."""
    out: dict[str, ThrottleRecord] = {}
    for r in recs:
        for t in r.machine.throttle if r.machine is not None else ():
            out.setdefault(t.phrase, t)
    return out


def new_throttles(slow: Sequence[RequestRecord], fast: Sequence[RequestRecord],
                  nvml: bool = True) -> tuple[tuple[str, str], ...]:
    """The throttles of the `slow` requests that the `fast` ones did not have, by phrase, as
    (phrase, where: "thermal_zone1 x86_pkg_temp: 97.0 °C >= passive trip 95.0 °C"); nvml
    False leaves out those NVML's reasons gave (`gpu_reasons` names them already)."""
    seen, before = throttles(slow), throttles(fast)
    return tuple((phrase, f"{t.device}: {t.detail}") for phrase, t in sorted(seen.items())
                 if phrase not in before and (nvml or t.source != "nvml"))


def number_ranges(numbers: Iterable[int]) -> str:
    """Request numbers as ranges: [8, 9, 10, 13] → "8–10, 13"."""
    out: list[str] = []
    run: list[int] = []
    for n in sorted(set(numbers)):
        if run and n != run[-1] + 1:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}–{run[-1]}")
            run = []
        run.append(n)
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}–{run[-1]}")
    return ", ".join(out)


def throttle_sentences(numbered: Iterable[tuple[int, RequestRecord]]) -> list[str]:
    """One sentence per throttle the (number, request) pairs saw at their edges, in order of
    first sight: "the GPU was power-capped during requests 8–13, 15 (gpu0: sw_power_cap)",
    where the figure is the first one seen. [] when none saw one (or none was read)."""
    seen: dict[str, tuple[list[int], ThrottleRecord]] = {}
    for number, r in numbered:
        for t in r.machine.throttle if r.machine is not None else ():
            seen.setdefault(t.phrase, ([], t))[0].append(number)
    return [f"{phrase} during requests {number_ranges(ns)} ({t.device}: {t.detail})"
            for phrase, (ns, t) in seen.items()]


THROTTLED_REMEDY = ("a request measured under a power cap or at a thermal limit measures "
                    "the machine's cooling or power setting as much as the engine: let it "
                    "cool, check its power mode (a laptop on battery or in a quiet profile; "
                    "nvidia-smi -q -d PERFORMANCE for a GPU's reasons) and measure again")


def throttle_finding(throttle: Sequence[ThrottleRecord]) -> FindingRecord | None:
    """The `throttled` WARN of one request that saw power caps or thermal limits at its
    edges: "the GPU was power-capped (gpu0: sw_power_cap) during the request", one phrase
    per kind of throttle with the first sensor that showed it ("; 7 more sensors": a hot
    package is past its limit on every core's sensor too), joined by "and"; value: the
    throttles counted. None for none."""
    if not throttle:
        return None
    by_phrase: dict[str, list[ThrottleRecord]] = {}
    for t in throttle:
        by_phrase.setdefault(t.phrase, []).append(t)
    said = " and ".join(
        f"{phrase} ({ts[0].device}: {ts[0].detail}"
        + (f"; {len(ts) - 1} more sensor{'s' if len(ts) > 2 else ''})" if len(ts) > 1 else ")")
        for phrase, ts in by_phrase.items())
    return FindingRecord("throttled", "warn", f"{said} during the request",
                         THROTTLED_REMEDY, float(len(throttle)), 0.0, "throttles")


def machine_series(
    requests: Sequence[RequestRecord], canaries: Sequence[CanaryRecord]
) -> dict[str, list[float | None]]:
    """Per CANARY_METRICS and READINGS key, one value per request in `requests` (None where
    the request had no canary before it or no reading)."""
    before = {c.before_request: c for c in canaries if c.before_request is not None}
    out: dict[str, list[float | None]] = {k: [] for k, *_ in CANARY_METRICS}
    for r in requests:
        c = before.get(r.id)
        out["canary_cpu_ms"].append(c.cpu_ms if c else None)
        out["canary_mem_ms"].append(c.mem_ms if c else None)
        out["canary_simd_ms"].append(c.simd_ms if c else None)
    for key, *_ in READINGS:
        out[key] = [reading(r, key) for r in requests]
    return out


def canary_medians(canaries: Sequence[CanaryRecord]) -> tuple[float, float, float] | None:
    """(median cpu ms, mem ms, simd ms) over a run's canaries; None without any canary that
    has all three parts (a log written before the simd part)."""
    full = [c for c in canaries if c.simd_ms is not None]
    if not full:
        return None
    return (statistics.median(c.cpu_ms for c in full),
            statistics.median(c.mem_ms for c in full),
            statistics.median(c.simd_ms for c in full if c.simd_ms is not None))


@dataclass(frozen=True, slots=True)
class NoisyFinding:
    """One reason the probes gave for NOISY, counted in samples. code: the finding's code;
    level: its worst level ("fail" when any sample had it at FAIL, else "warn"); message:
    the latest message at that level (its figures: a warn's figures are never shown under
    FAIL); samples: the NOISY samples that had it (at most the NOISY count, however many
    apps or lines a sample named it for); fail / warn: those where its worst level was
    FAIL / WARN (fail + warn = samples)."""

    code: str
    level: str
    message: str
    samples: int
    fail: int
    warn: int


def noisy_findings(probes: Iterable[ProbeRecord]) -> list[NoisyFinding]:
    """What made the NOISY samples NOISY: each WARN/FAIL finding code once, counted in the
    samples that had it (a sample with three busy apps counts once) and split by level,
    most samples first (ties: FAIL first, then code). [] without NOISY samples."""
    fail: dict[str, int] = {}
    warn: dict[str, int] = {}
    latest: dict[str, dict[str, str]] = {}
    for p in probes:
        if not p.noisy or p.verdict is None:
            continue
        worst: dict[str, str] = {}
        for f in p.verdict.findings:
            if f.level not in ("warn", "fail"):
                continue
            if worst.get(f.code) != "fail":
                worst[f.code] = f.level
            latest.setdefault(f.code, {})[f.level] = f.message
        for code, level in worst.items():
            counts = fail if level == "fail" else warn
            counts[code] = counts.get(code, 0) + 1
    out = []
    for code in {*fail, *warn}:
        failed, warned = fail.get(code, 0), warn.get(code, 0)
        level = "fail" if failed else "warn"
        out.append(NoisyFinding(code, level, latest[code][level], failed + warned, failed,
                                warned))
    return sorted(out, key=lambda nf: (-nf.samples, nf.level != "fail", nf.code))
