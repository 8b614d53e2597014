"""Which application was busy while requests were slow? Pure: session-log records in, a named
culprit (or an honest "nothing stands out") out.

The source's false "thermal throttling" was an open browser tab (docs/method.md, "Quiet machine").
The session log has what is needed to catch that: request records (`id`, `metrics`) and probe
records tagged with the request they overlapped (`{"type": "probe", "request_id": N, ...}`,
see log.py). This module compares, per application, its CPU during slow requests with its
CPU during fast ones.

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
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

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


def _counted(rec: Mapping[str, Any]) -> bool:
    if rec.get("type", "request") != "request" or not isinstance(rec.get("id"), int):
        return False
    return rec.get("phase", "measure") == "measure" and rec.get("status", "ok") == "ok"


def _value(rec: Mapping[str, Any], metric: str) -> float | None:
    v = (rec.get("metrics") or {}).get(metric)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


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


def _request_app_cpu(probes: Iterable[Mapping[str, Any]]) -> dict[str, float | None]:
    """Per app, the mean CPU over one request's probe samples (absent = 0, None skipped;
    None when every reading of a present app was unknown)."""
    usable = [p for p in probes if _apps(p) is not None]
    sums: dict[str, list[float]] = {}
    names = {a["app"] for p in usable for a in _apps(p) or () if _judged(a)}
    for name in names:
        readings = []
        for p in usable:
            entries = [a for a in _apps(p) or () if a.get("app") == name and _judged(a)]
            if not entries:
                readings.append(0.0)
                continue
            known = [float(a["cpu_percent"]) for a in entries if isinstance(a.get("cpu_percent"), int | float)]
            if known:
                readings.append(sum(known))
        sums[name] = readings
    return {name: statistics.fmean(r) if r else None for name, r in sums.items()}


def _apps(probe: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    procs = probe.get("processes")
    if not isinstance(procs, Mapping) or procs.get("warming_up"):
        return None
    apps = procs.get("apps")
    return apps if isinstance(apps, list) else None


def _judged(app: Mapping[str, Any]) -> bool:
    return isinstance(app.get("app"), str) and app.get("category") not in EXCLUDED_CATEGORIES


def attribute(
    requests: list[dict[str, Any]],
    probes: list[dict[str, Any]],
    metric: str = "server_decode_tps",
    higher_is_better: bool = True,
    *,
    slow_ids: Collection[int] | None = None,
    k: float = K_SPREAD,
    min_diff: float = MIN_DIFF_CPU,
) -> Attribution:
    """Name the application whose CPU was higher during slow requests than fast ones, or say
    that none stands out (see the module docstring for every rule). Never raises for odd
    records: those without the needed fields are skipped.

    requests: request records (`id`, `metrics`, optional `phase`/`status`); other record
    types are ignored. probes: probe records (`request_id`, `processes.apps`).
    metric / higher_is_better: the figure that decides slow (ignored when `slow_ids` given).
    """
    counted = [r for r in requests if _counted(r)]
    med = spread = None
    if slow_ids is not None:
        ids = [r["id"] for r in counted]
        slow = {i for i in ids if i in set(slow_ids)}
        fast = set(ids) - slow
    else:
        values = {r["id"]: v for r in counted if (v := _value(r, metric)) is not None}
        slow, med, spread = robust_slow(values, higher_is_better, k)
        fast = set(values) - slow

    def result(culprit: str | None, evidence: str, per_app: tuple[AppContrast, ...] = ()) -> Attribution:
        return Attribution(
            culprit, evidence, tuple(sorted(slow)), tuple(sorted(fast)), per_app,
            metric, higher_is_better, med, spread, min_diff,
        )

    if not slow:
        if slow_ids is not None:
            return result(None, "none of the given slow requests is among the counted requests")
        return result(None, f"no slow requests: every {metric} is within {k:g} × spread of the median")
    if not fast:
        return result(None, "every request is slow: there are no fast requests to compare with")

    by_request: dict[int, list[Mapping[str, Any]]] = {}
    for p in probes:
        rid = p.get("request_id")
        if p.get("type", "probe") == "probe" and isinstance(rid, int) and rid in slow | fast:
            by_request.setdefault(rid, []).append(p)
    cpu = {rid: _request_app_cpu(ps) for rid, ps in by_request.items()}
    slow_seen = [rid for rid in slow if rid in cpu]
    fast_seen = [rid for rid in fast if rid in cpu]
    if not slow_seen or not fast_seen:
        return result(None, "no probe samples overlap the slow or the fast requests: cannot attribute")

    names = sorted({name for per in cpu.values() for name in per})
    contrasts = []
    for name in names:
        s_vals = [v for rid in slow_seen if (v := cpu[rid].get(name, 0.0)) is not None]
        f_vals = [v for rid in fast_seen if (v := cpu[rid].get(name, 0.0)) is not None]
        contrasts.append(
            AppContrast(name, _mean(s_vals), _mean(f_vals), len(s_vals), len(f_vals))
        )
    contrasts.sort(key=lambda c: (c.diff is None, -(c.diff or 0.0), c.app))
    per_app = tuple(contrasts)
    top = per_app[0] if per_app else None
    if top is None or top.diff is None or top.diff <= min_diff:
        return result(None, NOTHING_STANDS_OUT, per_app)
    if len(per_app) > 1 and per_app[1].diff == top.diff:
        return result(None, NOTHING_STANDS_OUT + f" alone ({top.app} and {per_app[1].app} tie)", per_app)
    return result(top.app, top.evidence(), per_app)
