"""Analysis of a load sweep from its session log alone (pure over the log's records).

Per level: requests ok/failed (bench's per-request status rules, run.py), TTFT / TPOT /
ITL / E2E percentiles, request and output-token throughput, goodput under the SLO, the
engine's own queueing where its durations show it, the open loop's lag behind its timetable,
the generator's CPU, and the probes' verdict during the level. Then the knee.

Definitions:
* throughput (req/s) = ok requests / the level's wall time (first send, or first scheduled
  send, to the last completion); output tokens/s = their output tokens / the same time —
  `vllm bench serve`'s request and output throughput.
* goodput (req/s) = ok requests meeting every SLO term / wall time; the share is over all
  the level's requests (a failed request never meets it) — DistServe's goodput. In an open
  loop the SLO is judged on latencies from the *scheduled* send (coordinated omission).
* queueing (ms) = total_duration − load − prompt eval − eval, from the server's own stats
  (Ollama times the whole request, its wait for a slot included). llama-server gives no
  total: there it is the overhead, TTFT − `prompt_ms` (its wait for a free slot, plus the
  few ms of HTTP every request pays: 7–9 ms measured on 2 cores).
* knee: with an SLO, the highest level whose goodput share is ≥ KNEE_SHARE; without one, the
  first level after which throughput rises by less than KNEE_GAIN. An open-loop level stopped
  as over-saturated (saturation.py: its queue grew without bound) is beyond what the engine
  serves, so the knee is below it: the levels under the lowest such level are compared with
  each other and with it (its achieved throughput is the engine's limit: a level under it
  that served nearly as much was already at the limit), it is never the knee itself, and
  when throughput still rises up to it the advice is to sweep between the two, never higher.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from llmtop.sessions.analysis.energy import EnergySummary, summarize_energy
from llmtop.sessions.analysis.load_verdict import judge_sweep, knee_line
from llmtop.sessions.analysis.run import BenchStatus, first_pass_status
from llmtop.sessions.analysis.search import PointVerdict, SearchResult, judge, replay
from llmtop.sessions.analysis.verdict import RunVerdict
from llmtop.sessions.measure.config import LoadConfig
from llmtop.sessions.measure.metrics import E2E, TPOT, TTFT
from llmtop.sessions.measure.slo import ATTAINMENT, Slo
from llmtop.sessions.measure.stats import P95_MIN_SAMPLES, percentile
from llmtop.sessions.records.log import read_log
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.records.schema import Header, LevelRecord, ProbeRecord, RunLog, SaturationStop

KNEE_SHARE = ATTAINMENT  # goodput share stays ≥ 90 % (slo.py)
KNEE_GAIN = 0.10  # throughput "stops rising": the next level adds under 10 %
GENERATOR_CPU_WARN = 0.70  # share of one core: above it the generator may be the limit
LAG_WARN_MS = 5.0  # an open loop whose median send lags its timetable by more is behind
QUANTILES = (50, 90, 95, 99)


def min_samples(q: float) -> int:
    """Samples a q-th percentile needs before it is more than the slowest sample relabelled:
    100 / (100 − q), so p90 needs 10, p95 20 (stats.P95_MIN_SAMPLES, docs/method.md,
    "Statistics") and p99 100. The median needs 1."""
    if q <= 50:
        return 1
    return math.ceil(100 / (100 - q) - 1e-9)


assert min_samples(95) == P95_MIN_SAMPLES  # the bench's rule, generalised


@dataclass(frozen=True, slots=True)
class Percentiles:
    """n and p50/p90/p95/p99 of one metric (its unit); a percentile is None when n is below
    `min_samples(q)` (the honesty rule) or n is 0."""

    n: int
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None

    @classmethod
    def of(cls, values: Iterable[float | None]) -> Percentiles:
        """From the values present (None and non-finite ones are skipped)."""
        xs = [float(v) for v in values if v is not None and math.isfinite(v)]
        cells = [percentile(xs, q) if xs and len(xs) >= min_samples(q) else None for q in QUANTILES]
        return cls(len(xs), *cells)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True)
class LevelResult:
    """One level of a sweep. Times in ms, throughput in requests/s and tokens/s.

    value: concurrency (users) or rate (req/s); requests: all measured requests of the level;
    statuses: count per bench status. ttft/e2e_scheduled: open loop only, from the scheduled
    send. goodput_per_s/share: None without an SLO. lag_ms: open loop's send − scheduled.
    queue_ms: the engine's own queueing (None cells when it reports no durations).
    verdict: "QUIET", "NOISY: codes…" or "no samples". generator_cpu_share: the event loop's
    CPU time / wall time (1.0 = a whole core). server: llama-server's own figures over the
    level (runners/load/server_metrics.summarize: peak slots busy and requests deferred, token
    counters' growth), None without its `/metrics`.
    """

    level: int
    mode: str
    value: float
    requests: int
    ok: int
    statuses: dict[str, int]
    wall_s: float | None
    ttft: Percentiles
    tpot: Percentiles
    itl: Percentiles
    e2e: Percentiles
    ttft_scheduled: Percentiles | None
    e2e_scheduled: Percentiles | None
    lag_ms: Percentiles | None
    queue_ms: Percentiles
    req_per_s: float | None
    tok_per_s: float | None
    goodput_per_s: float | None
    goodput_share: float | None
    verdict: str
    generator_cpu_share: float | None
    generator_cpu_ms_per_request: float | None
    max_in_flight: int | None
    slo_met: int | None = None
    repeats: int = 1
    stopped: SaturationStop | None = None
    server: dict[str, Any] | None = None  # llama-server's /metrics over the level

    @property
    def failed(self) -> int:
        """Requests that did not complete ok."""
        return self.requests - self.ok

    @property
    def label(self) -> str:
        """ "1 user", "4 users" or "2 req/s"."""
        if self.mode != "concurrency":
            return f"{self.value:g} req/s"
        return f"{self.value:g} {'user' if self.value == 1 else 'users'}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True)
class Knee:
    """The sweep's knee: the level (None when no level qualifies), the rule used, one line."""

    level: LevelResult | None
    rule: str
    sentence: str


@dataclass(frozen=True)
class Parallelism:
    """How many requests the engine served at once, inferred from a closed loop's queueing
    (`infer_parallelism`). slots: the estimate rounded (≥ 1); in_service: the estimate
    itself; at_least: True when the level read showed no queueing, so the engine serves
    `slots` or more; level: the level it was read at; sentence: how it was inferred."""

    slots: int
    in_service: float
    at_least: bool
    level: LevelResult
    sentence: str


@dataclass(frozen=True)
class LoadAnalysis:
    """A sweep: its header, the SLO, every level, the knee, warnings for the reader, and the
    body of its start environment record ({} without one); its energy (analysis/energy.py:
    per level, the all-in J per output token); the SLO search's answer (analysis/search.py)
    when the sweep was one (`llmtop load --search`)."""

    header: Header
    mode: str
    slo: Slo
    levels: tuple[LevelResult, ...]
    knee: Knee
    warnings: tuple[str, ...]
    environment: dict[str, Any]
    energy: EnergySummary | None = None
    search: SearchResult | None = None
    parallelism: Parallelism | None = None
    dataset_used: int = 0  # a --dataset sweep's records sent (distinct lines)

    def level(self, index: int) -> LevelResult | None:
        """The level with this index (position in the config's levels), None when absent."""
        return next((lv for lv in self.levels if lv.level == index), None)

    @property
    def verdict(self) -> RunVerdict:
        """The sweep's one verdict (load_verdict.judge_sweep): what the load screen, the
        reports, `llmtop load`'s exit code and the sessions list all say."""
        return judge_sweep(self.levels)

    @property
    def knee_line(self) -> str:
        """The knee as every view states it, "not trusted" when a level ran NOISY."""
        return knee_line(self.knee.sentence, self.verdict)


def analyze_load(path: str | os.PathLike[str]) -> LoadAnalysis:
    """Analyse the load log at `path`. Raises LogError for an unreadable log."""
    return analyze_sweep(read_log(path))


def analyze_sweep(log: RunLog) -> LoadAnalysis:
    """Analyse a load log read back (its typed records, file order)."""
    config = log.header.load
    mode = "concurrency" if config is None else config.mode
    slo = Slo() if config is None else config.slo
    expected = _expected_tokens(log, None if config is None else config.prompt_tokens)
    marks = list(log.of_type(LevelRecord))
    ends = {r.level: r for r in marks if r.phase == "end"}
    starts = {r.level: r for r in marks if r.phase == "start"}
    levels = []
    short: list[str] = []
    for index, start in sorted(starts.items()):
        requests = [r for r in log.requests if r.load.level == index and r.phase == "measure"]
        if start.requests and len(requests) < start.requests:
            short.append(f"level {index + 1} ({start.value:g}): {len(requests)} of the "
                         f"{start.requests} planned requests were recorded: the run was cut "
                         "short (a time limit, a stop, a crash); its figures are from those "
                         f"{len(requests)} only")
        probes = [p for p in log.probes if p.level == index]
        levels.append(
            level_result(index, mode, start.value, requests, probes, ends.get(index), slo,
                         expected)
        )
    env = log.environment("start")
    warnings = [*log.warnings, *short, *_warnings(levels)]
    return LoadAnalysis(
        log.header,
        mode,
        slo,
        tuple(levels),
        find_knee(levels, slo, mode),
        tuple(warnings),
        dict(env.body) if env else {},
        summarize_energy(log),
        _search(config, mode, slo, levels),
        infer_parallelism(levels, mode),
        len({r.plan.dataset_line for r in log.requests if r.plan.dataset_line is not None}),
    )


def _search(config: LoadConfig | None, mode: str, slo: Slo,
            levels: Sequence[LevelResult]) -> SearchResult | None:
    """The SLO search replayed from its levels (in the order run), as the runner judged them;
    None when the sweep was not a search."""
    bounds = () if config is None else config.levels
    if config is None or not config.search or slo.empty or len(bounds) < 2:
        return None
    verdicts = [verdict(lv) for lv in levels if lv.requests]
    return replay(mode, min(bounds), max(bounds), verdicts).result(slo)


def verdict(lv: LevelResult) -> PointVerdict:
    """The search's verdict on one level (search.judge over its SLO counts)."""
    return judge(lv.value, lv.slo_met or 0, lv.requests, lv.repeats, lv.stopped is not None)


def _expected_tokens(log: RunLog, target: int | None) -> float | None:
    calibration = log.calibration
    if calibration is None or target is None:
        return None
    point = calibration.targets.get(str(target))
    return point.tokens if point else None


def _queue_ms(record: RequestRecord) -> float | None:
    stats = record.stats
    if stats is None:
        return None
    total, prefill, decode = (stats.total_duration, stats.prompt_eval_duration,
                              stats.eval_duration)
    if total is None and stats.source is not None and "llama.cpp" in stats.source:
        return record.metrics.overhead_ms  # TTFT − prompt_ms (module docstring)
    if not total or prefill is None or decode is None:
        return None
    return max(0.0, float(total - (stats.load_duration or 0) - prefill - decode) / 1e6)


def level_result(
    index: int,
    mode: str,
    value: float,
    requests: list[RequestRecord],
    probes: list[ProbeRecord],
    end: LevelRecord | None,
    slo: Slo,
    expected: float | None,
) -> LevelResult:
    """One level's figures from its request, probe and end records (end None: a level still
    running, as the SLO search judges it between repeats)."""
    statuses, ok = _statuses(requests, expected)
    wall_s = end.wall_ns / 1e9 if end and end.wall_ns else None
    open_loop = mode == "rate"
    lags = [r.load.lag_ms or 0.0 for r in ok]
    ttft = [r.metric(TTFT.key) for r in ok]
    e2e = [r.metric(E2E.key) for r in ok]
    tpot = [r.metric(TPOT.key) for r in ok]
    ttft_s = [None if t is None else t + lag for t, lag in zip(ttft, lags, strict=True)]
    e2e_s = [None if t is None else t + lag for t, lag in zip(e2e, lags, strict=True)]
    judged_ttft, judged_e2e = (ttft_s, e2e_s) if open_loop else (ttft, e2e)
    met = sum(1 for a, b, c in zip(judged_ttft, tpot, judged_e2e, strict=True) if slo.met(a, b, c))
    tokens = sum(r.metric("output_tokens") or 0 for r in ok)
    cpu_ns = end.generator_cpu_ns if end else None
    wall_ns = end.wall_ns if end else None
    return LevelResult(
        level=index,
        mode=mode,
        value=value,
        requests=len(requests),
        ok=len(ok),
        statuses=statuses,
        wall_s=wall_s,
        ttft=Percentiles.of(ttft),
        tpot=Percentiles.of(tpot),
        itl=Percentiles.of(x for r in ok for x in r.metrics.itl_ms),
        e2e=Percentiles.of(e2e),
        ttft_scheduled=Percentiles.of(ttft_s) if open_loop else None,
        e2e_scheduled=Percentiles.of(e2e_s) if open_loop else None,
        lag_ms=Percentiles.of(lags) if open_loop else None,
        queue_ms=Percentiles.of(_queue_ms(r) for r in ok),
        req_per_s=len(ok) / wall_s if wall_s else None,
        tok_per_s=tokens / wall_s if wall_s else None,
        goodput_per_s=None if slo.empty or not wall_s else met / wall_s,
        goodput_share=None if slo.empty or not requests else met / len(requests),
        verdict=probe_verdict(probes),
        generator_cpu_share=cpu_ns / wall_ns if cpu_ns and wall_ns else None,
        generator_cpu_ms_per_request=cpu_ns / 1e6 / len(requests) if cpu_ns and requests else None,
        max_in_flight=end.max_in_flight if end else None,
        slo_met=None if slo.empty else met,
        repeats=(end.repeats if end else None) or 1,
        stopped=end.stopped if end else None,
        server=end.server_metrics if end else None,
    )


def _statuses(requests: list[RequestRecord], expected: float | None
              ) -> tuple[dict[str, int], list[RequestRecord]]:
    """(how many requests had each status, the ok ones in order): bench's per-request status
    (run.first_pass_status), `expected` the calibrated output tokens (None: uncalibrated)."""
    statuses: dict[str, int] = {}
    ok = []
    for r in requests:
        status = str(first_pass_status(r, expected)[0])
        statuses[status] = statuses.get(status, 0) + 1
        if status == BenchStatus.OK:
            ok.append(r)
    return statuses, ok


def probe_verdict(probes: Sequence[ProbeRecord]) -> str:
    """ "QUIET" when every sample's verdict was quiet, "NOISY: code, code" naming the findings
    that were not, "no samples" when the level had none."""
    if not probes:
        return "no samples"
    codes: list[str] = []
    for p in probes:
        if p.verdict is None or p.verdict.quiet:
            continue
        for f in p.verdict.findings:
            if f.level != "info" and f.code not in codes:
                codes.append(f.code)
    return "QUIET" if not codes else "NOISY: " + ", ".join(codes)


def infer_parallelism(levels: Sequence[LevelResult], mode: str) -> Parallelism | None:
    """The engine's parallelism read from a closed loop's queueing, None when the sweep
    cannot show it (an open loop, no 1-user level, no level above it, a median or a
    throughput missing).

    With c users and s ≤ c slots, c − s requests wait for a slot: a request's TTFT grows by
    its wait, W = TTFT p50 at c − TTFT p50 at 1 user, and it is in service for E2E − W.
    Little's law over the level (requests in service = throughput × time in service) gives

        in service = req/s × (E2E p50 − max(W, 0)) / 1000

    (ms, medians standing in for means). An engine serving one request at a time under 4
    users: TTFT grows by 3 × one request's E2E, throughput stays at 1 user's, and the estimate
    is 1. Read at the highest level (the most queueing to read); when that level shows no
    queueing (the estimate within half a request of its users) the engine serves at least
    that many. For the engine's own figure where it has none (an Ollama whose environment
    could not be read, an API that reports no slots)."""
    if mode != "concurrency":
        return None
    ordered = sorted(levels, key=lambda lv: lv.value)
    one = next((lv for lv in ordered if lv.value == 1), None)
    top = ordered[-1] if ordered else None
    if one is None or top is None or top.value <= 1 or one.ttft.p50 is None:
        return None
    ttft, e2e, rate = top.ttft.p50, top.e2e.p50, top.req_per_s
    if ttft is None or e2e is None or not rate or one.e2e.p50 is None:
        return None
    wait = max(ttft - one.ttft.p50, 0.0)
    in_service = rate * (e2e - wait) / 1000.0
    at_least = in_service >= top.value - 0.5
    slots = int(top.value) if at_least else max(1, round(in_service))
    how = (f"inferred from the queueing at {top.label}: TTFT p50 {one.ttft.p50:.0f} → "
           f"{ttft:.0f} ms (+{wait / one.e2e.p50:.1f} × the 1-user E2E of {one.e2e.p50:.0f} ms), "
           f"throughput {_rate(one.req_per_s)} → {rate:.2f} req/s: {in_service:.1f} requests "
           "in service at once (Little's law)")
    said = f"at least {slots}" if at_least else f"{slots}"
    return Parallelism(slots, in_service, at_least, top,
                       f"{said} request{'s' if slots != 1 or at_least else ''} at a time, {how}")


def _rate(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _warnings(levels: Sequence[LevelResult]) -> list[str]:
    out = []
    for lv in levels:
        share = lv.generator_cpu_share
        if share is not None and share >= GENERATOR_CPU_WARN:
            out.append(
                f"at {lv.label} the generator used {share:.0%} of a core: it may be the "
                "bottleneck, not the engine; spread the load over machines (llmtop's "
                "Locust user class, docs/guide/load.md)"
            )
        if lv.lag_ms is not None and lv.lag_ms.p50 is not None and lv.lag_ms.p50 > LAG_WARN_MS:
            worst = max(x for x in (lv.lag_ms.p50, lv.lag_ms.p90, lv.lag_ms.p95) if x is not None)
            out.append(
                f"at {lv.label} sends lagged their schedule by {lv.lag_ms.p50:.1f} ms "
                f"(median; up to {worst:.1f} ms): latencies from the scheduled send "
                "include it"
            )
        if lv.failed and lv.stopped is None:  # a stopped level's cancels are its stop line's
            out.append(
                f"at {lv.label} {lv.failed} of {lv.requests} requests failed: "
                + ", ".join(f"{n} {s}" for s, n in lv.statuses.items() if s != "ok")
            )
    return out


def find_knee(levels: Sequence[LevelResult], slo: Slo, mode: str) -> Knee:
    """The knee and its one-line statement (rules in the module docstring)."""

    def who(v: float) -> str:
        if mode == "concurrency":
            return f"{v:g} concurrent user{'s' if v != 1 else ''}"
        return f"{v:g} requests/s"

    verb = "serves" if mode == "concurrency" else "sustains"
    ordered = sorted(levels, key=lambda lv: lv.value)
    if not ordered:
        return Knee(None, "none", "no level completed")
    if not slo.empty:
        rule = f"highest level with goodput share ≥ {KNEE_SHARE:.0%} ({slo.describe()})"
        good = [
            lv for lv in ordered if lv.goodput_share is not None and lv.goodput_share >= KNEE_SHARE
        ]
        if not good:
            return Knee(
                None,
                rule,
                f"no level met {slo.describe()} for {KNEE_SHARE:.0%} of its "
                f"requests (lowest tried: {who(ordered[0].value)})",
            )
        best = good[-1]
        return Knee(best, rule, f"this engine {verb} {who(best.value)} within {slo.describe()}")
    rule = f"first level after which throughput rises by less than {KNEE_GAIN:.0%}"
    over = next((lv for lv in ordered if lv.stopped is not None), None)
    if over is not None:
        rule += "; a level stopped as over-saturated is above the knee"
        ordered = [lv for lv in ordered if lv.value < over.value]
    for here, above in itertools.pairwise([*ordered, *([over] if over else [])]):
        if here.req_per_s and (above.req_per_s or 0) < here.req_per_s * (1 + KNEE_GAIN):
            return Knee(
                here,
                rule,
                f"throughput stops rising at {who(here.value)} "
                f"({here.req_per_s:.2f} req/s); more only adds latency",
            )
    if over is not None:
        return _knee_below(over, ordered[-1] if ordered else None, rule, who)
    top = ordered[-1]
    rate = f" ({top.req_per_s:.2f} req/s)" if top.req_per_s else ""
    return Knee(
        top,
        rule,
        f"throughput still rises at {who(top.value)}{rate}, the highest level "
        "tried: sweep higher to find the knee",
    )


def _knee_below(over: LevelResult, below: LevelResult | None, rule: str,
                who: Callable[[float], str]) -> Knee:
    """The knee when the sweep reached a level the engine could not serve (`over`, stopped
    as over-saturated: its queue grew without bound) with throughput still rising up to
    `below`, the highest level under it (None: `over` is the lowest level tried). The knee
    is under `over`: its achieved throughput is the engine's limit, never a level it
    sustains, so the advice is to sweep between the two, not higher."""
    served = f", {over.req_per_s:.2f} req/s served" if over.req_per_s else ""
    beyond = (f"the engine could not keep up with {who(over.value)} (stopped as "
              f"over-saturated{served})")
    if below is None:
        return Knee(None, rule, f"{beyond}, the lowest level tried: sweep lower to find the knee")
    rate = f" ({below.req_per_s:.2f} req/s)" if below.req_per_s else ""
    return Knee(
        below,
        rule,
        f"{beyond}; throughput still rises at {who(below.value)}{rate}: the knee lies "
        f"between the two, sweep between {below.value:g} and {over.value:g} to find it",
    )
