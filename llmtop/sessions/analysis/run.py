"""Analysis of a bench run from its log records alone (so a report is reproducible from the
session log): per-request bench status, slow episodes (episodes.py), per prompt size
statistics of the baseline (the ok requests outside every episode), drift, the verdict
(verdict.py); then what
the reports show beside it: which app slowed the slow requests, the relay's overhead in a
--compare-relay run, the probe samples' noise and GPU figures.

Works on the typed records of the log (records/schema.py), never on live objects. Everything
that computes lives here; the reports (sessions/reports/) only render.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property

from llmtop.engines.events import ServerStats, Status
from llmtop.sessions.analysis.attribution import (
    Attribution,
    CanaryPart,
    Cause,
    EngineSlowdown,
    MachineEvidence,
    attribute,
    name_cause,
)
from llmtop.sessions.analysis.episodes import Episodes, find_episodes
from llmtop.sessions.analysis.machine import (
    CANARY_METRICS,
    READINGS,
    gpu_reasons,
    machine_series,
    new_throttles,
)
from llmtop.sessions.analysis.verdict import RunVerdict, SizeEvidence, judge
from llmtop.sessions.measure.metrics import (
    CLIENT_DECODE,
    E2E,
    METRICS,
    OVERHEAD,
    PROMPT_EVAL,
    SERVER_DECODE,
    SERVER_PREFILL,
    TPOT,
    TTFT,
    Metric,
)
from llmtop.sessions.measure.stats import (
    DRIFT_ALPHA,
    DRIFT_FLOOR_MS,
    DRIFT_THRESHOLD_PCT,
    Drift,
    Summary,
    better_p_value,
    drift,
    percentile,
    summarize,
)
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.records.schema import CalibrationRecord, CanaryRecord, ProbeRecord, RunLog

# What a bench size summarises (the table's Carrier.BENCH), in the order its reports list them.
BENCH_METRICS: tuple[Metric, ...] = (
    TTFT, E2E, PROMPT_EVAL, SERVER_PREFILL, CLIENT_DECODE, SERVER_DECODE, TPOT, OVERHEAD,
)
# Derived small quantities: their drift is shown but never decides the verdict alone
# (docs/method.md, "The drift rule"). TPOT is 1000 / client decode rate, which decides in its
# stead; overhead is TTFT − (load + prefill), a small difference of two measurements whose
# few-ms wobble is a large percentage.
DERIVED_METRICS = frozenset({TPOT.key, OVERHEAD.key})
# The series searched for slow episodes (TTFT, prefill, decode rate, E2E); the
# client's decode rate stands in for the server's when the server reports none (an
# OpenAI-compatible server without timings).
EPISODE_METRICS = (TTFT.key, PROMPT_EVAL.key, SERVER_DECODE.key, E2E.key)


def drift_floor(unit: str) -> float:
    """The absolute floor a drift must exceed, in the metric's unit: DRIFT_FLOOR_MS for
    times; 0 for rates, whose server durations span whole generations (ns clocks, hundreds
    of ms), so the clock's resolution is far below the 5 % threshold."""
    return DRIFT_FLOOR_MS if unit == "ms" else 0.0

# Thresholds chosen by llmtop (documented in docs/guide/bench.md):
PROMPT_CUT_FRACTION = 0.8  # evaluated < 80 % of the calibrated prompt tokens: the server cut it
CACHED_FRACTION = 0.25  # prefill time per token < 25 % of the run's median → a cache hit
SIMILAR_COUNT = 2.0  # prompts within ×2 of each other's token count compare per token
# The server says it reused over 25 % of the prompt from its cache (llama.cpp's cache_n): a
# cache hit, whatever its time says. Distinct prompts share only the chat template's opening
# (a few tokens of ChatML: 3 to 5) and, rarely, a first word, far below a quarter.
CACHED_REPORTED_SHARE = 0.25
COLD_START_MS = 1000.0  # load_duration over 1 s ...
COLD_START_FACTOR = 10.0  # ... or over 10 × the others' median (and over 50 ms) is a (re)load
COLD_START_FLOOR_MS = 50.0
TIMING_GAP_SHARE = (
    0.25  # total − load − prompt eval − eval over 25 % of total: timings don't add up
)


CONTEXT_PHASES = frozenset({"cache-cold", "cache-warm", "turn", "turn-cold"})


class BenchStatus(StrEnum):
    """A bench request's status; only OK requests enter the statistics.

    Derived when a log is read, never written into it, so a value can change without a log
    format bump. PROMPT_CUT was called TRUNCATED, value "truncated", until the typed records
    came (a name that clashed with `Status.TRUNCATED`, a stream without a done chunk).
    Reports now say "prompt-cut"; `BenchStatus("truncated")`, as in an older report's CSV or
    JSON, still reads as PROMPT_CUT.
    """

    OK = "ok"
    ERROR = "error"
    PROMPT_CUT = "prompt-cut"  # the server evaluated far fewer prompt tokens than calibrated
    CACHED = "cached"  # the server evaluated far fewer tokens than sent (prefix cache)
    NO_GENERATION = "no-generation"
    DEGENERATE = "degenerate"  # < 2 output tokens or non-positive durations
    COLD_START = "cold-start"  # the model was (re)loaded inside a measured request
    CANCELLED = "cancelled"  # the user stopped it (Esc, a new prompt): not the engine's error

    @classmethod
    def _missing_(cls, value: object) -> BenchStatus | None:
        return cls.PROMPT_CUT if value == "truncated" else None


def first_pass_status(
    record: RequestRecord, expected_prompt_tokens: float | None
) -> tuple[BenchStatus, str]:
    """Status of one request judged on its own (the cached and cold-start checks need the
    whole run: see `analyze`). Returns (status, reason; "" for ok)."""
    if record.status == Status.CANCELLED:
        return BenchStatus.CANCELLED, "cancelled by the user"
    if record.status in (Status.ERROR, Status.TRUNCATED):
        return BenchStatus.ERROR, record.error or f"request {record.status}"
    if record.status == Status.NO_GENERATION:
        return BenchStatus.NO_GENERATION, (
            "the server loaded the model but generated nothing (done_reason load)"
        )
    s = record.stats or ServerStats()
    count = s.prompt_eval_count
    expected = expected_prompt_tokens
    if expected and count is not None and count < PROMPT_CUT_FRACTION * expected:
        return BenchStatus.PROMPT_CUT, (
            f"the server evaluated {count} prompt tokens, calibration predicts ~{expected:.0f}: "
            "it cut the prompt — raise num_ctx"
        )
    # An OpenAI-compatible server (stats `source` set) may offer no count or durations at
    # all: then the client's chunk count stands in and absent durations are n/a, not 0.
    absent_is_na = s.source not in (None, "ollama")
    eval_count = s.eval_count
    if eval_count is None and absent_is_na:
        eval_count = record.metrics.output_tokens
    if eval_count is None or eval_count < 2:
        return BenchStatus.DEGENERATE, (
            f"{eval_count or 0} output token(s): no decode rate can be measured"
        )
    if not (absent_is_na and s.eval_duration is None) and (
            not s.eval_duration or s.eval_duration <= 0):
        return BenchStatus.DEGENERATE, "eval_duration missing or not positive"
    if not (absent_is_na and s.prompt_eval_duration is None) and (
            not s.prompt_eval_duration or s.prompt_eval_duration <= 0):
        return BenchStatus.CACHED, "no prompt evaluation time: the prompt came from the cache"
    cached = s.prompt_cached_count
    if cached and count and cached > CACHED_REPORTED_SHARE * count:
        return BenchStatus.CACHED, (
            f"the server reused {cached} of {count} prompt tokens from its cache "
            "(prompt_cached_count): not a prefill sample")
    return BenchStatus.OK, ""


def timing_gap_share(record: RequestRecord) -> float | None:
    """(total − load − prompt eval − eval) / total, from the server's own durations."""
    s = record.stats
    if s is None or not s.total_duration:
        return None
    parts = (s.load_duration or 0) + (s.prompt_eval_duration or 0) + (s.eval_duration or 0)
    return (s.total_duration - parts) / s.total_duration


@dataclass
class RequestVerdict:
    """One request as the analysis sees it. number: a measured request's number within its
    prompt size as the user sees it (1 = the first after the warm-ups; None for a warm-up);
    episode: the 1-based number of the slow episode it fell in (None: outside every one)."""

    index: int
    phase: str  # "warmup" or "measure"
    prompt_tokens_target: int | None
    status: BenchStatus
    reason: str
    timing_gap_share: float | None
    record: RequestRecord = field(repr=False)
    number: int | None = None
    episode: int | None = None


@dataclass
class SizeAnalysis:
    """Everything about one prompt size: requests, statistics of the OK ones, drift.

    summaries / drifts / series are keyed by BENCH_METRICS keys and by machine.CANARY_METRICS and
    machine.READINGS keys (the machine's series beside the engine's; all None in a log
    without them). series: every ok request's values (the pictures, the episode finder);
    base_series, summaries and drifts: the baseline's (ok requests outside every episode).
    episodes: what the finder saw (EPISODE_METRICS). Only BENCH_METRICS outside DERIVED_METRICS
    decide `contaminated`.
    """

    target: int | None
    requests: list[RequestVerdict]
    summaries: dict[str, Summary]
    drifts: dict[str, Drift]
    series: dict[str, list[float | None]]
    path: str | None = None  # "direct" / "relay" in a --compare-relay run, else None
    threshold_pct: float = DRIFT_THRESHOLD_PCT  # the drift threshold the size was judged by
    episodes: Episodes = field(default_factory=lambda: Episodes({}))
    base_series: dict[str, list[float | None]] = field(default_factory=dict)
    # an interactive session's requests with different prompts: no episode, trend or drift
    # is judged (why, when so)
    unjudged: str | None = None

    @cached_property
    def ok(self) -> list[RequestVerdict]:
        """The measured requests that count (found once: a report of 100,000 requests asked
        for them 230 times, 7.8 s; the requests' phase and status are settled before a
        SizeAnalysis is made, and `replace` makes a new one)."""
        return [r for r in self.requests if r.phase == "measure" and r.status == BenchStatus.OK]

    @cached_property
    def baseline_positions(self) -> list[int]:
        """Positions in `ok` (and in every `series`) of the requests outside every episode."""
        return [i for i, r in enumerate(self.ok) if r.episode is None]

    def baseline_values(self, key: str) -> list[float]:
        """Series `key`'s values outside every episode, n/a left out (found once a key)."""
        cache: dict[str, list[float]] = self.__dict__.setdefault("_baseline_values", {})
        if key not in cache:
            values = self.series[key]
            cache[key] = [v for i in self.baseline_positions if (v := values[i]) is not None]
        return cache[key]

    @cached_property
    def position_of(self) -> dict[int, int]:
        """A measured request's number → its position in `ok` (and in every `series`)."""
        return {r.number: i for i, r in enumerate(self.ok) if r.number is not None}

    @property
    def baseline(self) -> list[RequestVerdict]:
        """The ok requests outside every slow episode: the baseline's figures."""
        return [r for r in self.ok if r.episode is None]

    @property
    def excluded(self) -> list[RequestVerdict]:
        """Measured requests that do not count, each with its reason."""
        return [r for r in self.requests if r.phase == "measure" and r.status != BenchStatus.OK]

    @property
    def warmups(self) -> list[RequestVerdict]:
        """The warm-up requests (kept, marked, never in the statistics)."""
        return [r for r in self.requests if r.phase == "warmup"]

    @property
    def contaminated(self) -> bool:
        """True when a deciding metric (not in DERIVED_METRICS) drifted by the drift rule,
        either way, or a deciding series is a trend."""
        return bool(self.drifted) or bool(self.episodes.trends)

    @property
    def drifted(self) -> list[str]:
        """The deciding metrics' keys whose baseline drift counts, worse or improved, in
        BENCH_METRICS order."""
        return [m.key for m in BENCH_METRICS if m.key not in DERIVED_METRICS
                and (self.drifts[m.key].worse or self.drifts[m.key].improved)]

    def evidence(self, required: int | None) -> SizeEvidence:
        """This size as the verdict reads it (verdict.SizeEvidence); required: the protocol's
        request count (None: not a bench, or an older log: its own measured requests, so
        episodes that were not re-measured leave it short)."""
        labels = {m.key: m.heading for m in BENCH_METRICS}
        drifted = tuple(f"{labels[k]} {d.change_pct:+.1f} %" for k in self.drifted
                        if (d := self.drifts[k]).change_pct is not None)
        judged = self.unjudged is None and (self.episodes.judged or any(
            d.change_pct is not None for d in self.drifts.values()))
        label = "interactive" if self.target is None else f"{self.target} tok"
        found = self.episodes
        faster = tuple(
            f"requests {e.requests} ("
            + ", ".join(f"{labels[k]} {e.changes[k]:+.0f} %" for k in e.faster if k in e.changes)
            + ")"
            for e in found.faster)
        return SizeEvidence(
            label + (f" · {self.path}" if self.path else ""),
            {labels[k]: pct for k, pct in found.trends.items()},
            drifted, found.episodes, len(self.baseline),
            required if required is not None else sum(r.phase == "measure" for r in self.requests),
            judged,
            {labels[k]: v for k, v in found.unsettled.items()},
            (found.outside, len(found.numbers)) if found.disagree else None,
            faster, self.unjudged)


@dataclass
class Analysis:
    """A whole run: one SizeAnalysis per prompt size, in the order the sizes ran."""

    sizes: list[SizeAnalysis]
    drift_threshold_pct: float
    load_requests: list[RequestRecord] = field(default_factory=list)  # phase "load" records
    # (NOISY requests, requests), over the measured requests outside every episode
    noisy: tuple[int, int] = (0, 0)
    required: int | None = None  # the protocol's measured requests per size (None: no bench)

    @property
    def load_ms(self) -> float | None:
        """The model load the run paid (the first request's load_duration), in ms."""
        loads = [x for r in self.load_requests if (x := r.metrics.load_ms) is not None]
        return max(loads) if loads else None

    @property
    def judgement(self) -> RunVerdict:
        """The run's verdict and its reasons (verdict.judge: the one rule everywhere)."""
        return judge([s.evidence(self.required) for s in self.sizes], self.noisy)

    @property
    def contaminated(self) -> bool:
        """True when the verdict is CONTAMINATED."""
        return self.judgement.contaminated

    @property
    def counted_ids(self) -> set[int]:
        """Ids of the measured requests outside every episode: those whose figures the run's
        baseline (and a comparison of it) is made of."""
        return {r.record.id for s in self.sizes for r in s.requests
                if r.phase == "measure" and r.episode is None}

    @property
    def judged(self) -> bool:
        """True when drift could be computed for at least one metric of one size (it needs
        2 × 5 ok requests); otherwise a clean verdict would claim what was never checked."""
        return any(d.change_pct is not None for s in self.sizes for d in s.drifts.values())

    @property
    def verdict(self) -> str:
        """The verdict's word (verdict.Word): "clean", "clean after re-measuring",
        "contaminated" or "inconclusive"."""
        return str(self.judgement.word)

    @property
    def ok_count(self) -> int:
        """Requests that entered the statistics."""
        return sum(len(s.ok) for s in self.sizes)

    @property
    def timing_warnings(self) -> list[RequestVerdict]:
        """OK requests whose server timings do not add up (a large unexplained share)."""
        return [
            r
            for s in self.sizes
            for r in s.ok
            if r.timing_gap_share is not None and r.timing_gap_share > TIMING_GAP_SHARE
        ]


def analyze(
    records: Iterable[RequestRecord],
    expected_tokens: Mapping[int, float] | None = None,
    drift_threshold_pct: float = DRIFT_THRESHOLD_PCT,
    canaries: Sequence[CanaryRecord] = (),
    *,
    probes: Sequence[ProbeRecord] = (),
    required: int | None = None,
) -> Analysis:
    """Analyse bench request records (with `phase`, `index`, `prompt_tokens_target`; an
    interactive session's have none and count as measured); `expected_tokens` maps a target
    to the calibrated token count; `canaries`, the log's canary records; `probes`, its probe
    samples (their NOISY share enters the verdict); `required`, the protocol's measured
    requests per size (a bench's `requests`: the count the baseline must reach)."""
    expected_tokens = expected_tokens or {}
    by_size: dict[tuple[int | None, str | None], list[RequestVerdict]] = {}
    load_requests = []
    for rec in records:
        if rec.phase == "load":
            load_requests.append(rec)
            continue
        if rec.phase in CONTEXT_PHASES:  # cache pairs and turns: analysis/context.py
            continue
        target = rec.plan.prompt_tokens_target
        status, reason = first_pass_status(rec, expected_tokens.get(target) if target else None)
        verdict = RequestVerdict(
            index=rec.position,
            phase=rec.phase or "measure",
            prompt_tokens_target=target,
            status=status,
            reason=reason,
            timing_gap_share=timing_gap_share(rec),
            record=rec,
        )
        by_size.setdefault((target, rec.path), []).append(verdict)
    sizes = [
        _analyze_size(target, reqs, drift_threshold_pct, path, canaries)
        for (target, path), reqs in by_size.items()
    ]
    return Analysis(sizes, drift_threshold_pct, load_requests,
                    noisy_requests(sizes, probes, baseline_only=True), required)


def analyze_run(log: RunLog) -> Analysis:
    """`analyze` a log read back: its requests, calibration, drift threshold, canaries,
    probe samples and (a bench's) request count."""
    bench = log.header.bench
    return analyze(log.requests, calibrated_tokens(log.calibration),
                   log.header.drift_threshold_pct, log.canaries, probes=log.probes,
                   required=None if bench is None else bench.requests)


def calibrated_tokens(calibration: CalibrationRecord | None) -> dict[int, float]:
    """Calibrated prompt tokens per target from a log's calibration record ({} without one;
    a target key that is not a number is left out)."""
    targets = calibration.targets if calibration else {}
    return {int(t): p.tokens for t, p in targets.items() if t.isdigit()}


def _analyze_size(
    target: int | None, requests: list[RequestVerdict], threshold: float, path: str | None = None,
    canaries: Sequence[CanaryRecord] = (),
) -> SizeAnalysis:
    for number, r in enumerate((r for r in requests if r.phase == "measure"), start=1):
        r.number = number
    measured = [r for r in requests if r.phase == "measure" and r.status == BenchStatus.OK]
    _mark_cold_starts(measured)
    _mark_cached(measured)
    ok = [r for r in measured if r.status == BenchStatus.OK]
    series = {m.key: [r.record.metric(m.key) for r in ok] for m in BENCH_METRICS}
    series.update(machine_series([r.record for r in ok], canaries))
    counts = [c for r in ok if r.record.stats and (c := r.record.stats.prompt_eval_count)]
    if target is None and counts and max(counts) > SIMILAR_COUNT * min(counts):
        # prompts of unlike lengths: a change point or a trend would be the prompts'
        # differences, read as the machine's ("faster than the
        # baseline during requests 1–3" that were 7-token prompts among 500-word ones,
        # listed among "slow episodes")
        prompts = len({r.record.prompt for r in ok})
        return SizeAnalysis(
            target=target, requests=requests,
            summaries={key: summarize(values) for key, values in series.items()},
            drifts={k: replace(d, note="not judged: the session's prompts differ in length")
                    for k, d in _drifts({k: [] for k in series}, threshold).items()},
            series=series, path=path,
            threshold_pct=threshold, base_series=series,
            unjudged=(f"interactive: {prompts} prompts of {min(counts)} to {max(counts)} "
                      "tokens, so no episode, trend or drift is judged (a bench measures one "
                      "prompt size)"))
    episodes = _find_episodes(ok, series, threshold)
    which = {n: i for i, e in enumerate(episodes.episodes, start=1) for n in e.numbers}
    for r in ok:  # one look-up a request: a tuple's `in` per episode was O(n × episode)
        r.episode = which.get(r.number or 0, r.episode)
    keep = [r.episode is None for r in ok]
    base = {k: [v for v, kept in zip(vs, keep, strict=True) if kept] for k, vs in series.items()}
    summaries = {key: summarize(values) for key, values in base.items()}
    return SizeAnalysis(
        target=target,
        requests=requests,
        summaries=summaries,
        drifts=_drifts(base, threshold),
        series=series,
        path=path,
        threshold_pct=threshold,
        episodes=episodes,
        base_series=base,
    )


def _drifts(series: Mapping[str, list[float | None]], threshold: float) -> dict[str, Drift]:
    """stats.drift of each engine, canary and reading series (first 5 vs last 5)."""
    # The canary is timed around pure computation, not an event loop: no absolute floor.
    floors = {m.key: drift_floor(m.unit) for m in BENCH_METRICS}
    directions = [(m.key, m.higher_is_better) for m in BENCH_METRICS]
    directions += [(key, better) for key, _l, _u, better in CANARY_METRICS + READINGS]
    return {
        key: drift(series[key], higher_is_better=better, threshold_pct=threshold,
                   floor=floors.get(key, 0.0))
        for key, better in directions
    }


def _find_episodes(
    ok: list[RequestVerdict], series: dict[str, list[float | None]], threshold: float
) -> Episodes:
    """The episode finder on EPISODE_METRICS of the ok requests (the client's decode rate
    when the server's is n/a throughout)."""
    keys = list(EPISODE_METRICS)
    if all(v is None for v in series[SERVER_DECODE.key]):
        keys[keys.index(SERVER_DECODE.key)] = CLIENT_DECODE.key
    return find_episodes(
        [r.number or 0 for r in ok], {k: series[k] for k in keys},
        {k: METRICS[k].higher_is_better for k in keys}, threshold_pct=threshold,
        floors={k: drift_floor(METRICS[k].unit) for k in keys})


def others_median(loads: Sequence[float]) -> list[float | None]:
    """For each value, the median of the others (None when it is alone): the warm level a
    request's load is judged against, leaving the request itself out — with the median of
    all, the first of two requests (load 826.8 ms, then 0.3) was its own reference and passed
    as warm. O(n log n): one sort, then index arithmetic."""
    ordered = sorted(loads)
    n = len(ordered)
    out: list[float | None] = []
    for value in loads:
        if n < 2:
            out.append(None)
            continue
        k = bisect.bisect_left(ordered, value)  # the one occurrence left out
        m = n - 1

        def kept(j: int, k: int = k) -> float:
            return ordered[j] if j < k else ordered[j + 1]

        out.append((kept((m - 1) // 2) + kept(m // 2)) / 2)
    return out


def cold_starts(loads_ms: Sequence[float]) -> list[tuple[bool, float | None]]:
    """Per request, (cold, warm): cold when its load_duration (ms) is over COLD_START_MS, or
    over COLD_START_FLOOR_MS and COLD_START_FACTOR × `warm`, the median of the other
    requests' loads (`others_median`). The reports, the TUI's history and `run` share it."""
    return [(load > COLD_START_MS or (warm is not None and load > COLD_START_FLOOR_MS
                                      and load > COLD_START_FACTOR * warm), warm)
            for load, warm in zip(loads_ms, others_median(loads_ms), strict=True)]


def _mark_cold_starts(requests: list[RequestVerdict]) -> None:
    loads = [((r.record.stats or ServerStats()).load_duration or 0) / 1e6 for r in requests]
    for r, load, (cold, warm) in zip(requests, loads, cold_starts(loads), strict=True):
        if cold:
            r.status = BenchStatus.COLD_START
            against = "" if warm is None else f" (the others' median {warm:.1f} ms)"
            r.reason = f"load_duration {load:.0f} ms{against}: the model was (re)loaded"


def _mark_cached(requests: list[RequestVerdict]) -> None:
    """Mark the prefix-cache hits among `requests` (in order): a request whose prefill took a
    token under CACHED_FRACTION of the time that (a) the same prompt took the first time it
    was sent (an interactive session's), or (b) the median of the requests of a similar
    prompt length took (counts
    within SIMILAR_COUNT of its own; at least 3 of them, itself included). Per-token times
    are compared only between like prompts: a short prompt's are mostly fixed cost, and an
    interactive session mixes lengths (a cold 400-word prompt, 2.05
    ms/token against the session's median 10.4 over 7-token prompts, was called cached and
    dropped from the statistics while the TUI said ok). A calibrated bench size is one
    length, so (b) is the run's rule as before; (a) is the TUI's (`SessionState`)."""
    per_token: dict[int, tuple[float, int]] = {}
    for r in requests:
        s = r.record.stats
        if s is not None and s.prompt_eval_count and s.prompt_eval_duration:
            per_token[id(r)] = (s.prompt_eval_duration / s.prompt_eval_count,
                                s.prompt_eval_count)
    first_seen: dict[str, float] = {}
    like_median: dict[int, float | None] = {}
    for r in requests:
        mine = per_token.get(id(r))
        if mine is None:
            continue
        value, count = mine
        # (a) in an interactive session only: a bench's prompts are each new by design
        earlier = first_seen.get(r.record.prompt) if r.prompt_tokens_target is None else None
        if earlier is not None and value < CACHED_FRACTION * earlier:
            _cached(r, value, earlier, "the same prompt's first time")
            continue
        first_seen.setdefault(r.record.prompt, value)
        if count not in like_median:  # once per prompt length: a bench's one size is O(n)
            like = [v for v, c in per_token.values()
                    if count / SIMILAR_COUNT <= c <= count * SIMILAR_COUNT]
            like_median[count] = statistics.median(like) if len(like) >= 3 else None
        median = like_median[count]
        if median is not None and value < CACHED_FRACTION * median:
            _cached(r, value, median, "the run's median for prompts of its length")


def _cached(r: RequestVerdict, value: float, against: float, what: str) -> None:
    r.status = BenchStatus.CACHED
    r.reason = (f"prefill took {value / 1e6:.3f} ms/token, under {CACHED_FRACTION:.0%} of "
                f"{what} ({against / 1e6:.3f} ms/token): most of the prompt came from the "
                "cache")


# ---------------------------------------------------------------------- beside the statistics

# Which drifted metric decides "slow" for attribution, most telling first: decode rate is
# where the source's browser showed (−30.8 %). Derived metrics never decide (DERIVED_METRICS).
ATTRIBUTION_ORDER = tuple(
    m.key for m in (SERVER_DECODE, CLIENT_DECODE, TTFT, PROMPT_EVAL, SERVER_PREFILL, E2E))
SLOW_MARGIN = 0.05  # slower than the first-5 median by over 5 %: the drift threshold's default


def size_key(size: SizeAnalysis) -> int | str | None:
    """How a size is keyed in attributions: its target, or "target:path" in a relay
    comparison."""
    return size.target if size.path is None else f"{size.target}:{size.path}"


def slow_by_drift(size: SizeAnalysis) -> tuple[str, bool, set[int]] | None:
    """For a drifted size: the first drifted metric in ATTRIBUTION_ORDER, whether higher is
    better for it, and the ids of the ok requests worse than its first-5 median by more than
    SLOW_MARGIN. None when no metric drifted (or the drifted one has no first median)."""
    drifted = [key for key in ATTRIBUTION_ORDER if size.drifts[key].worse]
    if not drifted:
        return None
    key = drifted[0]
    better = METRICS[key].higher_is_better
    base = size.drifts[key].first_median
    if base is None:
        return None
    limit = SLOW_MARGIN * abs(base)
    slow = set()
    for r in size.ok:
        value = r.record.metric(key)
        if value is None:
            continue
        if (better and value < base - limit) or (not better and value > base + limit):
            slow.add(r.record.id)
    return key, better, slow


def engine_slowdown(size: SizeAnalysis) -> EngineSlowdown | None:
    """The drift a cause must explain: the first drifted metric in ATTRIBUTION_ORDER and how
    much slower the engine ran, % of time (a rate's fall r0 → r1 is r0 / r1 − 1 slower).
    None when no deciding metric drifted."""
    key = next((k for k in ATTRIBUTION_ORDER if size.drifts[k].worse), None)
    if key is None:
        return None
    d = size.drifts[key]
    label, better = METRICS[key].shown, METRICS[key].higher_is_better
    if d.first_median is None or d.last_median is None or d.change_pct is None:
        return None
    slower = d.first_median / d.last_median - 1 if better and d.last_median else d.change_pct / 100
    return EngineSlowdown(key, label, 100.0 * slower)


def machine_evidence(size: SizeAnalysis) -> MachineEvidence:
    """Each canary part's drift and the readings' first-5 → last-5 medians of a size."""
    canary = tuple(
        CanaryPart(label.removeprefix("canary: "), d.change_pct, d.worse, _differ(size, k, d))
        for k, label, *_ in CANARY_METRICS if (d := size.drifts[k]).change_pct is not None
    )
    readings = {k: (size.drifts[k].first_median, size.drifts[k].last_median) for k, *_ in READINGS}
    recs = [r.record for r in size.ok]
    new_reasons = gpu_reasons(recs[-5:]) - gpu_reasons(recs[:5])
    return MachineEvidence(canary, readings, tuple(sorted(new_reasons)), size.threshold_pct,
                           new_throttles(recs[-5:], recs[:5], nvml=False))


def _differ(size: SizeAnalysis, key: str, d: Drift) -> bool:
    """A canary series' first and last 5 really differ in the direction it moved (one-sided
    rank test at DRIFT_ALPHA): slower, drift computed that p; faster, its mirror (a canary
    part is a time: lower is better)."""
    if d.change_pct is None or d.change_pct == 0:
        return False
    values = size.base_series.get(key, size.series[key])
    p = d.p_value if d.change_pct > 0 else better_p_value(values, higher_is_better=False)
    return p is not None and p < DRIFT_ALPHA


def cause_of(size: SizeAnalysis, attribution: Attribution) -> Cause | None:
    """Who slowed a drifted size (attribution.name_cause); None when it did not drift."""
    engine = engine_slowdown(size)
    if engine is None:
        return None
    return name_cause(attribution, engine, machine_evidence(size))


def whole_run(size: SizeAnalysis) -> SizeAnalysis:
    """The size judged as though it had no episodes: the drift of every ok request's series,
    the run's first 5 against its last 5. For naming who slowed a run whose episodes leave
    nothing to measure them against (every request is in one: the series' levels disagree,
    or no level holds the run; seen under a CPU quota lowered mid-run on a busy machine,
    tests/integration/test_bench_machine_slows.py) — the cause a run without the episode
    finder would have named."""
    return replace(size, drifts=_drifts(size.series, size.threshold_pct),
                   base_series=size.series)


def attribute_size(size: SizeAnalysis, probes: Sequence[ProbeRecord]) -> Attribution:
    """Which app likely slowed this size's slow requests: the drift's slow requests when it
    drifted (`slow_by_drift`), else attribution's own outlier rule."""
    requests = [r.record for r in size.ok]
    by_drift = slow_by_drift(size)
    if by_drift is not None:
        key, better, slow = by_drift
        return attribute(requests, probes, key, better, slow_ids=slow)
    return attribute(requests, probes)


@dataclass(frozen=True)
class RelayComparison:
    """Paired direct vs relayed requests of one prompt size (a --compare-relay run).

    pairs: pairs where both requests were ok. ttft_diff_*: relay − direct client TTFT, ms
    (median and the interquartile range, stats.percentile). overhead_*: median client TTFT
    − (load + server prefill) per path, ms. decode_*: median client decode rate, tok/s.
    """

    target: int | None
    pairs: int
    ttft_diff_median: float | None
    ttft_diff_p25: float | None
    ttft_diff_p75: float | None
    overhead_direct: float | None
    overhead_relay: float | None
    decode_direct: float | None
    decode_relay: float | None


def _ttft_by_pair(size: SizeAnalysis) -> dict[int, float]:
    return {
        r.record.plan.pair if r.record.plan.pair is not None else r.index: ttft
        for r in size.ok
        if (ttft := r.record.metrics.ttft_ms) is not None
    }


def relay_comparisons(analysis: Analysis) -> list[RelayComparison]:
    """Pair each relayed request with the direct one of the same pair index and size."""
    out = []
    for target in dict.fromkeys(s.target for s in analysis.sizes if s.path):
        by_path = {s.path: s for s in analysis.sizes if s.target == target and s.path}
        direct, relay = by_path.get("direct"), by_path.get("relay")
        if direct is None or relay is None:
            continue
        d, r = _ttft_by_pair(direct), _ttft_by_pair(relay)
        diffs = [r[i] - d[i] for i in sorted(d.keys() & r.keys())]
        out.append(RelayComparison(
            target=target, pairs=len(diffs),
            ttft_diff_median=statistics.median(diffs) if diffs else None,
            ttft_diff_p25=percentile(diffs, 25) if diffs else None,
            ttft_diff_p75=percentile(diffs, 75) if diffs else None,
            overhead_direct=direct.summaries[OVERHEAD.key].median,
            overhead_relay=relay.summaries[OVERHEAD.key].median,
            decode_direct=direct.summaries[CLIENT_DECODE.key].median,
            decode_relay=relay.summaries[CLIENT_DECODE.key].median,
        ))
    return out


def noisy_requests(sizes: Sequence[SizeAnalysis], probes: Iterable[ProbeRecord], *,
                   baseline_only: bool = False) -> tuple[int, int]:
    """(measured requests that a NOISY probe sample overlapped, measured requests).
    baseline_only: count only the measured requests outside every episode, those the
    baseline's figures come from (the verdict's NOISY rule: a slowed stretch that was found,
    excluded and re-measured does not make its baseline noisy)."""
    measured = {r.record.id for s in sizes for r in s.requests if r.phase == "measure"
                and not (baseline_only and r.episode is not None)}
    noisy = {p.request_id for p in probes if p.noisy and p.request_id in measured}
    return len(noisy), len(measured)


def noisy_samples(probes: Iterable[ProbeRecord],
                  requests: Collection[int] | None = None) -> tuple[int, int]:
    """(NOISY probe samples, all probe samples) among those taken during a request (during
    one of `requests`, by id, when given)."""
    during = [p for p in probes if p.request_id is not None
              and (requests is None or p.request_id in requests)]
    return sum(1 for p in during if p.noisy), len(during)


@dataclass(frozen=True)
class GpuUsage:
    """What the probe samples saw of the GPUs over the whole log (any vendor's readings).

    util_median: median utilisation %, over every device of every sample (None: no reading).
    peak_used: the largest memory used by one device in one sample, bytes.
    """

    util_median: float | None = None
    peak_used: int | None = None
    source: str = "nvml"  # who read them ("nvml", "sysfs", … joined by "+"; older logs: NVML)


def gpu_usage(probes: Iterable[ProbeRecord]) -> GpuUsage:
    """The GPU figures of a log's probe samples (see GpuUsage)."""
    devices = [d for p in probes if p.gpu is not None for d in p.gpu.devices]
    utils = [d.util_percent for d in devices if d.util_percent is not None]
    used = [d.memory_used for d in devices if d.memory_used is not None]
    named = sorted({d.source or "nvml" for d in devices})  # logs before other vendors: NVML
    return GpuUsage(statistics.median(utils) if utils else None, max(used) if used else None,
                    "+".join(named) or "nvml")


def warmup_load_ms(size: SizeAnalysis, analysis: Analysis) -> float | None:
    """The largest load among the run's first request and this size's warm-ups, ms (None
    when none of them reported one)."""
    candidates = [r.record.metrics.load_ms for r in size.warmups] + [analysis.load_ms]
    loads = [x for x in candidates if x is not None]
    return max(loads) if loads else None
