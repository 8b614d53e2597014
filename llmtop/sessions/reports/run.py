"""A run's report: `Report`, a session log's analysis with what a report shows beside it.

`build(log)` gathers a log's analysis (analysis/run.py: statistics, drift, attribution,
relay comparison, probe figures; analysis/episode_causes.py: the slow episodes' causes;
analysis/context.py: the prefill sweep, cache pairs and turns; analysis/energy.py) into a
`Report`, computed from the log alone; a bench hands over the analysis it already made of
the same records, so one run is analysed once; `bench --runs K` adds its runs'
repeatability. Rendering is elsewhere: run_markdown.py writes the markdown (the source's
form, docs/method.md, "Result table"), run_data.py the CSV and JSON, run_environment.py the
machine's and energy's sections they share; formats.render picks one, or the HTML page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmtop.sessions.analysis.attribution import Attribution, Cause
from llmtop.sessions.analysis.bandwidth import BandwidthVerdict, bandwidth_verdict
from llmtop.sessions.analysis.context import (
    CachePair,
    PrefillSweep,
    Turn,
    cache_pairs,
    conversation,
    prefill_sweep,
)
from llmtop.sessions.analysis.depth import DepthRow, depth_sweep
from llmtop.sessions.analysis.energy import EnergySummary, summarize_energy
from llmtop.sessions.analysis.engine_own import EngineOwnView, engine_own_view
from llmtop.sessions.analysis.episode_causes import EpisodeCause, episode_causes
from llmtop.sessions.analysis.offload import gpu_share, offload_finding
from llmtop.sessions.analysis.repeat import SizeSpread
from llmtop.sessions.analysis.run import (
    Analysis,
    GpuUsage,
    RelayComparison,
    analyze_run,
    attribute_size,
    cause_of,
    engine_slowdown,
    gpu_usage,
    noisy_samples,
    relay_comparisons,
    size_key,
    whole_run,
)
from llmtop.sessions.analysis.soc import soc_findings
from llmtop.sessions.measure.metrics import CLIENT_DECODE, SERVER_DECODE
from llmtop.sessions.records.schema import (
    CalibrationRecord,
    EnvironmentRecord,
    FindingRecord,
    PreflightRecord,
    RunLog,
    SummaryRecord,
)


@dataclass(frozen=True)
class Repeatability:
    """`bench --runs K`: per prompt size, the spreads of the runs' baseline medians
    (analysis/repeat.py), and the runs' logs in run order."""

    sizes: list[SizeSpread]
    logs: list[str]


@dataclass
class Report:
    """A log's analysis plus what a report shows beside it, all computed in sessions/analysis/.

    attributions: per prompt size (`analysis.run.size_key`), which application likely slowed
    the slow requests, or that none stands out. noisy: (NOISY probe samples, all probe
    samples) taken during requests. relay: the --compare-relay pairs (empty otherwise).
    causes: per drifted prompt size, who slowed it (an app, the machine, or unexplained):
    the cause of its costliest slowdown, the baseline's drift or its costliest episode (by
    % of time slower; a quota that slowed the last requests 10 times is named over a 12 %
    drift left in the free ones). episodes: per
    prompt size, every slow episode with its cost and cause (episode_causes.py).
    sweep / pairs / turns: the prefill curve of a sweep of 2+ sizes, the prefix-cache pairs
    and the conversation's turns (analysis/context.py; None / empty when the run had none);
    cold_turns: the conversation replayed with the cache defeated (bench --turns).
    depths: a context-depth sweep's rows (analysis/depth.py; empty when the run had none).
    engine_own: the engine's own figures the TUI's engine panel logged (analysis/engine_own.py;
    None when it logged none).
    soc: a system on chip's heat and memory findings over the measured requests
    (analysis/soc.py: thermal-pressure, memory-bandwidth-contender; empty when none).
    repeatability: the spread of `bench --runs K`'s runs, this log being the last (None for
    one run, and for `llmtop report`, which reads one log).
    """

    log: RunLog
    analysis: Analysis
    calibration: CalibrationRecord | None
    env_start: EnvironmentRecord | None
    env_end: EnvironmentRecord | None
    summary: SummaryRecord | None
    interrupted: bool
    preflight: PreflightRecord | None = None

    @property
    def loaded(self) -> dict[str, Any]:
        """/api/ps's view of the loaded model, from the end environment else the start's."""
        return ((self.env_end.loaded if self.env_end else None)
                or (self.env_start.loaded if self.env_start else None) or {})
    attributions: dict[int | str | None, Attribution] = field(default_factory=dict)
    noisy: tuple[int, int] = (0, 0)
    gpu: GpuUsage = field(default_factory=GpuUsage)
    relay: list[RelayComparison] = field(default_factory=list)
    causes: dict[int | str | None, Cause] = field(default_factory=dict)
    energy: EnergySummary | None = None
    sweep: PrefillSweep | None = None
    pairs: list[CachePair] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    cold_turns: list[Turn] = field(default_factory=list)
    episodes: dict[int | str | None, list[EpisodeCause]] = field(default_factory=dict)
    bandwidth: BandwidthVerdict | None = None
    offload: FindingRecord | None = None
    repeatability: Repeatability | None = None
    soc: tuple[FindingRecord, ...] = ()
    depths: list[DepthRow] = field(default_factory=list)
    engine_own: EngineOwnView | None = None


def _episode_cost(found: EpisodeCause) -> float:
    """How much slower the engine ran in an episode, % of time (0 when no series found it)."""
    return found.slowdown.slower_pct if found.slowdown else 0.0


def build(log: RunLog, analysis: Analysis | None = None,
          repeatability: Repeatability | None = None) -> Report:
    """The report of a log (bench or interactive session). analysis: `analyze_run(log)`
    when the caller made it already (a bench's outcome: the report then analyses nothing
    again); None: made here. repeatability: `bench --runs`' spread, for its last run."""
    calibration = log.calibration
    analysis = analysis if analysis is not None else analyze_run(log)
    episodes = {size_key(s): episode_causes(s, log.probes) for s in analysis.sizes}
    attributions = {size_key(s): attribute_size(s, log.probes) for s in analysis.sizes}
    causes = {size_key(s): c for s in analysis.sizes
              if (c := cause_of(s, attributions[size_key(s)])) is not None}
    for s in analysis.sizes:  # the costliest slowdown names the size's cause
        key = size_key(s)
        costly = max(episodes[key], key=_episode_cost, default=None)
        if costly is None or costly.cause is None:
            continue
        drift = engine_slowdown(s) if key in causes else None
        if drift is None or _episode_cost(costly) > drift.slower_pct:
            attributions[key], causes[key] = costly.attribution, costly.cause
    for s in analysis.sizes:  # episodes that cover the run leave no baseline: the whole run's
        key = size_key(s)
        if key not in causes and episodes[key]:
            whole = whole_run(s)
            whole_att = attribute_size(whole, log.probes)
            if (c := cause_of(whole, whole_att)) is not None:
                attributions[key], causes[key] = whole_att, c
    sweep = prefill_sweep(analysis, log.header.bench.prior_curve if log.header.bench else None)
    num_ctx = (log.header.options or {}).get("num_ctx")
    return Report(
        log=log,
        analysis=analysis,
        calibration=calibration,
        env_start=log.environment("start"),
        env_end=log.environment("end"),
        summary=log.summary,
        interrupted=log.interrupted,
        preflight=log.preflight,
        attributions=attributions,
        noisy=noisy_samples(log.probes),
        gpu=gpu_usage(log.probes),
        relay=relay_comparisons(analysis),
        causes=causes,
        energy=summarize_energy(log),
        sweep=sweep,
        pairs=cache_pairs(log.requests),
        turns=conversation(log.requests, sweep.prefill if sweep else None,
                           num_ctx if isinstance(num_ctx, int) else None),
        cold_turns=conversation(log.requests, sweep.prefill if sweep else None,
                                num_ctx if isinstance(num_ctx, int) else None, "turn-cold"),
        episodes=episodes,
        bandwidth=run_bandwidth(analysis, log.environment("end")),
        offload=run_offload(log, analysis),
        soc=soc_findings([r.record for s in analysis.sizes for r in s.ok], log.probes),
        repeatability=repeatability,
        depths=depth_sweep(analysis),
        engine_own=engine_own_view(log),
    )


def run_offload(log: RunLog, analysis: Analysis) -> FindingRecord | None:
    """The `offload-mismatch` finding of a run (analysis/offload.py): the engine's claim at
    the run's end (`loaded`: /api/ps's size_vram of size) against the probe samples taken
    during its measured requests, with their median decode rate."""
    end = log.environment("end")
    loaded = end.loaded if end is not None else None
    if not isinstance(loaded, dict):
        return None
    ids = {r.record.id for s in analysis.sizes for r in s.ok}
    probes = [p for p in log.probes if p.request_id in ids]
    size = max(analysis.sizes, key=lambda s: len(s.ok), default=None)
    decode = None
    if size is not None:
        found = size.summaries.get(SERVER_DECODE.key) or size.summaries.get(CLIENT_DECODE.key)
        decode = found.median if found is not None else None
    config = end.body.get("engine_config") if end is not None else None
    engine = "llama-server" if isinstance(config, dict) and \
        config.get("server") == "llama-server" else "ollama"
    return offload_finding(gpu_share(loaded.get("size"), loaded.get("size_vram")), probes,
                           decode, engine)


def run_bandwidth(analysis: Analysis, end: EnvironmentRecord | None) -> BandwidthVerdict | None:
    """The bandwidth-bound verdict (analysis/bandwidth.py) of a run whose end record carries
    this machine's memory bandwidth (bench measures it after its requests, when the engine
    runs on this machine); None for a log without it. The decode rate is the baseline
    median of the size with the most measured requests, the server's rate where it gives
    one (the client's otherwise)."""
    measured = end.body.get("memory_bandwidth") if end is not None else None
    if not isinstance(measured, dict):
        return None
    assert end is not None  # the figure is in the end record
    body = end.body
    raw_details, raw_loaded = body.get("model_details"), body.get("loaded")
    details: dict[str, Any] = raw_details if isinstance(raw_details, dict) else {}
    loaded: dict[str, Any] = raw_loaded if isinstance(raw_loaded, dict) else {}
    size = max(analysis.sizes, key=lambda s: len(s.ok), default=None)
    decode = None
    if size is not None:
        for key in (SERVER_DECODE.key, CLIENT_DECODE.key):
            if (found := size.summaries.get(key)) is not None and found.median:
                decode = found.median
                break
    weights = details.get("weights_bytes")
    rate = measured.get("bytes_per_s")
    return bandwidth_verdict(decode, weights if isinstance(weights, int) else None,
                             rate if isinstance(rate, int | float) else None,
                             in_gpu_memory=bool(loaded.get("size_vram")),
                             family=details.get("family") if isinstance(details.get("family"),
                                                                        str) else None)
