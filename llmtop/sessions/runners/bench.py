"""`llmtop bench`: the measurement protocol of the source documents, end to end.

Order of a run (docs/method.md, "The bench run"):
1. record the environment (engine, model, options, machine, GPU, power);
2. calibrate cache-busting prompts against the server's own token counts (prompts.py);
3. per prompt size: `warmup` discarded-but-kept requests, then `requests` measured ones, each
   with a fresh random prompt of the calibrated word count and the same fixed options;
   between measured requests, never during one, the machine-speed canary runs (a "canary"
   record, probes/canary.py), and each request records the machine's readings over it
   (its `machine` field: steal, clocks, cgroup throttling; probes/machine_speed.py);
4. energy, where this machine has a readable source (runners/energy.py): the sources line
   first, idle power over the preflight window, each request's joules (prefill, decode,
   J/token; `SessionRecorder.measure` samples its edges) and the run's all-in J/token;
5. re-measure around slow episodes (docs/guide/bench.md, "Slow episodes"): after a size's
   requests, the log so far (the records the recorder kept in memory) is analysed; while
   it has episodes (analysis/episodes.py) and its baseline is short (`remeasure_shortfall`:
   fewer than `requests` ok requests outside them, under half of the run, or the run
   ending in a faster episode), the runner pauses `remeasure_pause_s` and measures the
   shortfall again, until the baseline is complete or `remeasure_budget` extra requests
   are spent (default: `requests` more, twice the protocol's count in all; 0 is
   off). Extra requests are phase "measure", their index continuing the size's;
6. analyse from the log's records alone (analysis/run.py): statuses, episodes, the
   baseline's n/median/min/max/p95, drift, the verdict;
7. append the summary (with the verdict's word). Everything is flushed record by record.

`BenchRunner.run` is these phases by name (`_start`, `_measure`, `_finish`). The recorder
keeps every record it writes, as the reader would read it back (recorder.KeptLog), so the
run never reads its own file: the outcome carries the log and its one analysis, which the
report takes as they are (reports/run.build); the file stays what `llmtop report` reads.

Progress goes to an `on_progress(BenchProgress)` callback and token events to `on_event`, so
the CLI and the TUI drive the same runner.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any

from llmtop.engines.base import Engine
from llmtop.engines.connection import Connection
from llmtop.engines.events import StreamEvent
from llmtop.probes.bandwidth import machine_bandwidth
from llmtop.probes.canary import Canary, CanaryCache
from llmtop.probes.config import load_thresholds
from llmtop.probes.engine_identity import is_local_host
from llmtop.probes.machine_speed import MachineReader, interval
from llmtop.probes.remote import AgentTarget, make_sampler
from llmtop.probes.sampler import SamplerState
from llmtop.sessions.analysis.context import prefill_sweep
from llmtop.sessions.analysis.machine import canary_medians
from llmtop.sessions.analysis.run import Analysis, SizeAnalysis, analyze_run, noisy_requests
from llmtop.sessions.analysis.verdict import mostly_noisy
from llmtop.sessions.measure.config import BenchConfig
from llmtop.sessions.measure.dataset import Dataset
from llmtop.sessions.measure.prompts import INSTRUCTION, PromptGenerator, run_salt
from llmtop.sessions.measure.request import TOKEN_TIMEOUT_S, RequestResult
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.records.schema import (
    CalibrationRecord,
    CanaryRecord,
    InterruptedRecord,
    PreflightRecord,
    RunLog,
    SummaryRecord,
)
from llmtop.sessions.runners.calibration import Calibration, CalibrationCache, calibrate
from llmtop.sessions.runners.context import run_cache_pairs, run_conversation
from llmtop.sessions.runners.curves import CurveStore, SavedCurve, curve_key, curve_label
from llmtop.sessions.runners.energy import EnergyMeter, local_meter
from llmtop.sessions.runners.environment import (
    PROBE_INTERVAL_S,
    environment_record,
    preflight_record,
)
from llmtop.sessions.runners.recorder import RequestFields, SessionRecorder


@dataclass(frozen=True)
class BenchProgress:
    """Where the run is: phase ("environment", "calibrating", "warmup", "measure",
    "cache-cold", "cache-warm", "turn", "done"), the prompt size (None for the pairs and
    turns), the request's position (1-based) and the total, and the last result."""

    phase: str
    target: int | None = None
    done: int = 0
    total: int = 0
    result: RequestResult | None = None
    record: RequestRecord | None = None
    message: str = ""


@dataclass
class BenchOutcome:
    """A finished run: its analysis (of `log`: hand it to the report, which then analyses
    nothing again), calibration, log path and the log as written (the records the recorder
    kept, end record included: what `read_log(log_path)` gives)."""

    analysis: Analysis
    calibration: Calibration | None  # None: a --dataset run (no calibrated sizes)
    log_path: str
    log: RunLog


class NoisyMachine(Exception):
    """`require_quiet` was set and the preflight check found the machine NOISY."""

    def __init__(self, preflight: PreflightRecord) -> None:
        findings = "; ".join(f.message for f in preflight.problems)
        super().__init__(f"the machine is NOISY: {findings or 'see the preflight record'}")
        self.preflight = preflight


def episode_tags(analysis: Analysis) -> list[dict[str, Any]]:
    """Every slow episode of a run as the summary record keeps it (SummaryRecord.episodes)."""
    return [
        {"prompt_tokens_target": size.target, "path": size.path, "first": e.first,
         "last": e.last,
         "request_ids": [r.record.id for r in size.ok if r.number in e.numbers],
         "changes_pct": {k: round(v, 2) for k, v in e.changes.items()}}
        for size in analysis.sizes for e in size.episodes.episodes
    ]


def remeasure_shortfall(size: SizeAnalysis, requests: int) -> int:
    """How many more requests a size needs re-measured (0: none, or re-measuring cannot
    help), by episodes.py's rules: none without episodes or with a trend; else the most of
    the protocol's `requests` less the baseline's, the requests that put the baseline at
    half of the run (n − 2 × baseline, when the series' episodes together are the majority),
    and, when the run ends in a faster episode, the requests that make that level half of
    the run (n − 2 × its requests: the engine runs at it now)."""
    found = size.episodes
    if not found.episodes or found.trends:
        return 0
    n, base = len(found.numbers), len(size.baseline)
    need = max(requests - base, n - 2 * base)
    last = found.ends_faster
    if last is not None:
        need = max(need, n - 2 * len(last.numbers), 1)
    return need


class BenchRunner:
    """Runs one bench on a connection, writing a bench session log.

    token_timeout_s: each request's time without a token before it ends stalled (s).
    dataset: the user's requests (measure/dataset.py) in place of calibrated prompts: warm-ups
    and measured requests take its records in file order (from the start again past its
    last), each cache-busted unless the config's `measure_cache`; their sizes are the
    server's counts. Raises LogError (log not writable) and CalibrationError (prompt sizes
    unreachable).
    """

    def __init__(
        self,
        conn: Connection,
        config: BenchConfig,
        log_path: str | None = None,
        on_progress: Callable[[BenchProgress], None] | None = None,
        on_event: Callable[[StreamEvent], None] | None = None,
        extra_header: dict[str, Any] | None = None,
        agent: AgentTarget | None = None,
        energy: EnergyMeter | None = None,
        token_timeout_s: float = TOKEN_TIMEOUT_S,
        dataset: Dataset | None = None,
    ) -> None:
        self.conn = conn
        self.dataset = dataset
        self._measured: list[RequestResult] = []
        self.agent = agent  # --probes: probe samples from the engine's machine
        self.curve_key = curve_key(conn.engine.name, conn.engine.host, conn.model)
        if config.prior_curve is None:
            prior = CurveStore().load(self.curve_key)
            config = replace(config, prior_curve=prior.to_entry() if prior else None)
        if dataset is not None:  # which traffic was measured: the file's name, size, digest
            config = replace(config, dataset=dataset.identity())
        self.config = config
        self.on_progress = on_progress or (lambda _p: None)
        self.on_event = on_event
        header = {"bench": config.to_dict(), **(extra_header or {})}
        # this machine's energy sources (none read when the probes watch another machine)
        self.energy = energy or local_meter(conn.upstream.host, agent,
                                            lambda: conn.engine_pids)
        self.recorder = SessionRecorder(
            conn, config.options(), log_path, kind="bench", extra_header=header,
            think=config.think, energy=self.energy, token_timeout_s=token_timeout_s, keep=True,
        )
        self.canary = Canary()
        self._probe_sampler: SamplerState | None = None  # while `measuring` runs
        self.machine = MachineReader(lambda: conn.engine_pids)

        if config.compare_relay and not conn.via_relay:
            raise ValueError(
                "compare_relay needs a connection through the relay (connect(..., via='relay'))"
            )

    @property
    def log_path(self) -> str:
        """Where the run is logged."""
        return str(self.recorder.log.path)

    async def _bandwidth(self) -> dict[str, Any]:
        """{"memory_bandwidth": …} of this machine, for the bandwidth-bound verdict, when
        the engine runs here and no agent samples another machine; measured (once, then
        cached: probes/bandwidth.py) after the run's requests, never beside them."""
        if self.agent is not None or not is_local_host(self.conn.upstream.host):
            return {}
        found = await asyncio.to_thread(machine_bandwidth)
        return {"memory_bandwidth": found.to_dict()} if found is not None else {}

    async def run(self) -> BenchOutcome:
        """Run the whole protocol (the module's doc): start (environment, preflight),
        measure (the load request, then a dataset's requests or the calibrated sizes and the
        context phases), finish (energy, the end environment, the one analysis, the
        summary). The log is closed when this returns or raises; the outcome's log and
        analysis come from memory (the recorder kept its records). Raises NoisyMachine,
        CalibrationError, LogError, and CancelledError when cancelled (after logging it)."""
        with self.measuring():
            salt = await self._start()
            calibration = await self._measure(salt)
            analysis = await self._finish(calibration)
        return self.outcome(analysis, calibration)

    @contextlib.contextmanager
    def measuring(self) -> Iterator[None]:
        """The probe sampler running inside the block; the canary and the log closed when it
        ends, however it ends: what `run` holds around its phases, and what a driver that runs
        the phases itself holds around them (runners/engines.py)."""
        sampler = self._sampler()
        self._probe_sampler = sampler
        sampler.start()
        try:
            yield
        finally:
            sampler.stop()
            self.canary.close()
            self.recorder.close()

    def outcome(self, analysis: Analysis, calibration: Calibration | None) -> BenchOutcome:
        """The finished run (after `finish`, the log closed), its "done" progress said."""
        outcome = BenchOutcome(analysis, calibration, self.log_path, self.recorder.kept())
        self.on_progress(BenchProgress("done", message="done"))
        return outcome

    def _sampler(self) -> SamplerState:
        """The probe sampler of the run, logging each sample with the request it overlaps
        (docs/method.md, "Quiet machine")."""
        return make_sampler(self.agent, PROBE_INTERVAL_S, self.recorder.record_probe,
                            lambda: self.conn.engine_pids, load_thresholds(),
                            on_state=self.recorder.record_probe_state,
                            energy=self.energy.reader,
                            engine_threads=lambda: self.conn.compute_threads(
                                self.recorder.options),
                            thread_setting=lambda: self.conn.thread_setting)

    async def _start(self, salt: str | None = None) -> str:
        """The start environment record, then the preflight (when `preflight_s`); returns
        the run's prompt salt (`salt`, else a new one: several engines measured together
        share one, so they are sent the same prompts). Raises NoisyMachine (`require_quiet`
        and a NOISY machine)."""
        self.on_progress(
            BenchProgress("environment", message="reading the engine's environment")
        )
        salt = salt or run_salt()  # new prompts in every run: a server's prompt cache outlives it
        self.recorder.log.write(await environment_record(self.conn, "start",
                                                         prompt_salt=salt))
        if self.config.preflight_s > 0:
            await self._preflight()
        return salt

    async def _preflight(self) -> None:
        """Sample the machine for `preflight_s` (its idle power too) and log the verdict."""
        cfg = self.config
        self.on_progress(
            BenchProgress(
                "preflight",
                message=f"preflight: sampling the machine for {cfg.preflight_s:g} s",
            )
        )
        idle_from = self.energy.sample()
        preflight = await preflight_record(self.conn, cfg.preflight_s, self.agent)
        idle_to = self.energy.sample("end")
        self.recorder.log.write(preflight)
        for record in self.energy.measure_idle(idle_from, idle_to):
            self.recorder.log.write(record)
        verdict = f"preflight {preflight.verdict}" + "".join(
            f"\n  {f.level.upper()} {f.message} — {f.remedy}" for f in preflight.problems
        )
        self.on_progress(BenchProgress("preflight", message=verdict))
        if cfg.require_quiet and not preflight.quiet:
            raise NoisyMachine(preflight)

    async def _measure(self, salt: str) -> Calibration | None:
        """The load request, then the dataset's requests or the calibrated sizes and the
        context phases; returns the calibration (None for a dataset)."""
        self.on_progress(
            BenchProgress("warmup", message="first request (pays the model load, if any)")
        )
        await self._load_request()
        if self.dataset is not None:
            await self._run_dataset(self.dataset, salt)
            return None
        return await self._calibrated_sizes(salt)

    async def _finish(self, calibration: Calibration | None) -> Analysis:
        """The run's energy and end environment, then the one analysis of the log kept in
        memory, the canary medians and the prefill curve it keeps, and the summary record;
        returns the analysis. What the log gets after it (the summary, the end record, probe
        samples between requests) changes no figure of it: analyze_run reads the requests,
        the calibration, the canaries and the probe samples taken during requests."""
        self._write_run_energy()
        self.recorder.log.write(await environment_record(self.conn, "end",
                                                         **await self._bandwidth()))
        log = self.recorder.kept()
        analysis = analyze_run(log)
        self._remember_canary(log)
        if calibration is not None:
            self._save_curve(log, analysis, calibration)
        self.recorder.log.write(
            SummaryRecord(analysis.contaminated, analysis.ok_count,
                          self.config.drift_threshold_pct, analysis.verdict,
                          episode_tags(analysis))
        )
        return analysis

    async def _calibrated_sizes(self, salt: str) -> Calibration:
        """Calibrate the prompt sizes, then run each size and the context phases."""
        calibration = await self.calibrate()
        generator = PromptGenerator(self.config.seed, salt=salt)
        with self._interrupt_logged():
            for target in self.config.prompt_tokens:
                await self._run_size(target, calibration, generator)
            await self._run_context(calibration, generator)
        return calibration

    async def calibrate(self) -> Calibration:
        """Calibrate the prompt sizes against the server (the cache's, re-checked, unless
        `use_cache` is off) and log the calibration record. Raises CalibrationError."""
        cfg = self.config
        self.on_progress(BenchProgress("calibrating", message="calibrating prompt sizes"))
        cache = CalibrationCache() if cfg.use_cache else None
        calibration = await calibrate(
            self.conn.engine,
            self.conn.model,
            list(cfg.prompt_tokens),
            {**cfg.options(), "num_predict": 1},
            seed=cfg.seed,
            cache=cache,
            think=cfg.think,
        )
        self.recorder.log.write(CalibrationRecord.of(calibration.to_dict()))
        how = (
            "from the cache (re-checked with one probe)"
            if calibration.from_cache
            else "measured"
        )
        table = ", ".join(
            f"{t} tok → {p.words} words ({p.tokens})" for t, p in calibration.targets.items()
        )
        self.on_progress(BenchProgress("calibrating", message=f"calibration {how}: {table}"))
        return calibration

    async def start(self, salt: str) -> None:
        """The phases before the prompt sizes, for a driver that interleaves several runners'
        requests (runners/engines.py): the start environment (with `salt`), the preflight,
        the load request. Raises NoisyMachine."""
        await self._start(salt)
        await self._load_request()

    async def measure_one(self, fields: RequestFields, total: int, prompt: str) -> None:
        """One calibrated-size request of `prompt` (phase, index, size in `fields`; `total`:
        the size's requests), a canary before it when it is measured; logged as the
        cancel's "interrupted" record when cancelled."""
        with self._interrupt_logged():
            await self._one(fields, total, prompt, self.conn.engine)

    async def finish(self, calibration: Calibration) -> BenchOutcome:
        """The phases after the requests (`_finish`: energy, the end environment, the one
        analysis, the summary), the log closed, the outcome made."""
        analysis = await self._finish(calibration)
        # the sampler stopped before the log closes: a driver running several runners
        # (runners/engines.py) finishes them one after another, and a sample of this
        # engine taken during the next one's finish would be written to a closed log
        if self._probe_sampler is not None:
            self._probe_sampler.stop()
        self.recorder.close()
        return self.outcome(analysis, calibration)

    @contextlib.contextmanager
    def _interrupt_logged(self) -> Iterator[None]:
        """An "interrupted" record when the block is cancelled (the cancel goes on)."""
        try:
            yield
        except asyncio.CancelledError:
            self.recorder.log.write(InterruptedRecord(datetime.now().astimezone().isoformat()))
            raise

    async def _run_dataset(self, dataset: Dataset, salt: str) -> None:
        """The dataset's requests: `warmup` warm-ups then `requests` measured, records in
        file order from the first (a warm-up's record is measured again: never from the
        cache, since each send carries its own tag), each with its own max_tokens and
        options over the run's; no re-measuring (the requests differ in size, so one slow
        stretch is not an episode of one workload)."""
        cfg = self.config
        how = ("sent as they are (--measure-cache: a prefix cache may serve them)"
               if cfg.measure_cache else "each starting with a tag of its own (cache-busted)")
        self.on_progress(BenchProgress(
            "calibrating", message=f"dataset {dataset.name}: {len(dataset.records)} requests, "
            f"{dataset.skipped} skipped as bad; {how}"))
        total = cfg.warmup + cfg.requests
        with self._interrupt_logged():
            for i in range(total):
                phase = "warmup" if i < cfg.warmup else "measure"
                record = dataset.pick(i if phase == "warmup" else i - cfg.warmup)
                n = self.recorder.requests + 1
                messages = record.messages if cfg.measure_cache else record.busted(f"{salt}-{n}")
                options = {**self.recorder.options, **record.options}
                if record.max_tokens is not None:
                    options["num_predict"] = record.max_tokens
                fields = RequestFields(phase=phase, index=i, dataset_line=record.line)
                await self._one(fields, total, messages[-1]["content"], self.conn.engine,
                                history=list(messages[:-1]), options=options)

    def _write_run_energy(self) -> None:
        """The "run" energy records: the measured ok requests' own windows summed, all-in J
        per output token over them (`EnergyMeter.in_requests`): the figure to use where
        per-request windows are too coarse."""
        for record in self.energy.in_requests(self._measured):
            self.recorder.log.write(record)
    async def _run_context(self, calibration: Calibration, generator: PromptGenerator) -> None:
        """The cache pairs, then the conversation, when the config asks for them."""
        def progress(phase: str, done: int, total: int, result: RequestResult | None,
                     record: RequestRecord | None) -> None:
            message = f"{phase} {done + (result is None)}/{total}"
            self.on_progress(BenchProgress(phase, None, done, total, result, record, message))
        if self.config.cache_pairs:
            await run_cache_pairs(self.recorder, calibration, self.config.cache_pairs, generator,
                                  progress, self.on_event)
        if self.config.turns:
            await run_conversation(self.recorder, calibration, self.config.turns, generator,
                                   progress, self.on_event, cold=self.config.cold_turns)

    def _save_curve(self, log: RunLog, analysis: Analysis, calibration: Calibration) -> None:
        """Save a sweep's prefill curve for this model (when `save_curve` and it has one that
        is not a poor fit: `Curve.poor_fit`), with the calibration's tokens per word for
        predicting a typed prompt."""
        sweep = prefill_sweep(analysis)
        if not self.config.save_curve or sweep is None or sweep.prefill is None:
            return
        if sweep.poor_fit():
            return  # a curve the report calls poor would mislead the next prediction
        points = [p for p in calibration.targets.values() if p.words]
        template = calibration.template_tokens or 0
        ratios = [(p.tokens - template) / p.words for p in points]
        ratio = sum(ratios) / len(ratios) if ratios else None
        # the calibration's template tokens hold the bench prompts' closing instruction,
        # which a typed prompt does not have
        chat = template - round(len(INSTRUCTION.split()) * (ratio or 0))
        saved = SavedCurve(sweep.prefill, curve_label(log.header.started_at, self.log_path),
                           ratio, max(chat, 0))
        CurveStore().store(self.curve_key, saved, self.log_path)

    def _remember_canary(self, log: RunLog) -> None:
        """Keep this run's canary medians for `llmtop preflight` (only when the run may use
        caches: `use_cache`)."""
        medians = canary_medians(log.canaries)
        if self.config.use_cache and medians is not None:
            CanaryCache().store(*medians, source=f"bench {self.log_path}")

    async def _canary(self, before_request: int | None) -> None:
        """Run the canary (in a thread: a TUI's event loop stays responsive) and log it."""
        t_ns = time.perf_counter_ns()
        result = await asyncio.to_thread(self.canary.run)
        self.recorder.log.write(CanaryRecord.from_json(
            {"before_request": before_request, "t_ns": t_ns, **result.to_dict()}))

    async def _load_request(self) -> None:
        """One short request before anything else, so the model's load lands in a request of
        its own (phase "load": kept in the log and the report's load column, never a sample)."""
        options = {**self.config.options(), "num_predict": 2}  # num_predict does not force a reload
        await self.recorder.measure("Hello", options=options,
                                    fields=RequestFields(phase="load", index=0, prompt_words=1))

    async def _run_size(
        self, target: int, calibration: Calibration, generator: PromptGenerator
    ) -> None:
        cfg = self.config
        words = calibration.targets[target].words
        total = cfg.warmup + cfg.requests
        await self._requests(target, words, range(total), total, generator)
        extra = 0
        while extra < cfg.extra_budget:
            found = self._size_so_far(target)
            if found is None:
                return
            size, noisy = found
            short = remeasure_shortfall(size, cfg.requests)
            if short <= 0:
                return
            if mostly_noisy(noisy):  # more requests would meet the same noise
                bad, measured = noisy
                self.on_progress(BenchProgress(
                    "remeasure", target, 0, 0,
                    message=f"not re-measuring: the probes called the machine NOISY during "
                    f"{bad} of {measured} requests, so more requests would be as noisy; quiet "
                    "the machine (the probe panel and `llmtop preflight` name what is busy) "
                    "and run again"))
                return
            more = min(short, cfg.extra_budget - extra)
            where = ", ".join(e.requests + (" (faster)" if e.faster else "")
                              for e in size.episodes.episodes)
            self.on_progress(BenchProgress(
                "remeasure", target, 0, more,
                message=f"episodes away from the baseline level so far at requests {where}: "
                f"{len(size.baseline)} of "
                f"{cfg.requests} requests outside them; re-measuring {more} after a "
                f"{cfg.remeasure_pause_s:g} s pause"))
            await asyncio.sleep(cfg.remeasure_pause_s)
            start = total + extra
            await self._requests(target, words, range(start, start + more), start + more,
                                 generator)
            extra += more

    def _size_so_far(self, target: int) -> tuple[SizeAnalysis, tuple[int, int]] | None:
        """The analysis of one prompt size from the log written so far, with (its measured
        requests a NOISY probe sample overlapped, its measured requests)."""
        log = self.recorder.kept()
        analysis = analyze_run(log)
        size = next((s for s in analysis.sizes if s.target == target and s.path is None), None)
        return None if size is None else (size, noisy_requests([size], log.probes))

    async def _requests(
        self, target: int, words: int, indexes: range, total: int, generator: PromptGenerator
    ) -> None:
        cfg = self.config
        for i in indexes:
            # a depth sweep's sizes are its depths: each request says so (PlanTags.depth)
            depth = target if cfg.depths is not None else None
            fields = RequestFields(phase="warmup" if i < cfg.warmup else "measure", index=i,
                                   prompt_tokens_target=target, prompt_words=words, depth=depth)
            if not cfg.compare_relay:
                await self._one(fields, total, generator.make(words), self.conn.engine)
                continue
            # Paired run: both paths per index, alternating which goes first; each request has a
            # fresh prompt of the same calibrated size (never the same prompt twice: caches).
            paths = [("direct", self.conn.upstream), ("relay", self.conn.engine)]
            for path, engine in paths if i % 2 == 0 else reversed(paths):
                await self._one(replace(fields, path=path, pair=i), total,
                                generator.make(words), engine)

    async def _one(
        self,
        fields: RequestFields,
        total: int,
        prompt: str,
        engine: Engine,
        *,
        history: list[Mapping[str, Any]] | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        """Measure one request of the sizes or the dataset (`fields`: its phase, index,
        size...; `total`: the size's requests, for the progress line) on `engine`, after a
        canary when it is measured; a dataset's request has its `history` and `options`."""
        phase, i, target = fields.phase or "measure", fields.index or 0, fields.prompt_tokens_target
        if phase == "measure":  # between requests, never during one (nor tagged as in one)
            await self._canary(self.recorder.requests + 1)
        label = f" {fields.path}" if fields.path is not None else ""
        self.on_progress(
            BenchProgress(phase, target, i, total,
                          message=f"{self.config.position(phase, i)}{label}")
        )
        before = self.machine.read()
        result, record = await self.recorder.measure(
            prompt, self.on_event, engine=engine, options=options, history=history or (),
            late=lambda _: RequestFields(machine=asdict(interval(before, self.machine.read()))),
            fields=fields,
        )
        if phase == "measure" and result.status == "ok":
            self._measured.append(result)
        self.on_progress(BenchProgress(phase, target, i + 1, total, result=result, record=record))
