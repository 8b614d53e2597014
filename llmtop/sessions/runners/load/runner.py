"""`llmtop load`: concurrency and request-rate sweeps over one engine, on one event loop.

Order of a run (the bench protocol where it applies, docs/method.md, "The bench run"):
1. the environment record, with the engine's parallel slots where it reveals them;
2. an optional preflight, one load request (the model's load lands there), calibration of the
   prompt size against the server's token counts (calibration.py), and one warm-up round of
   concurrent requests (kept in the log, in no level);
3. per level (or, with `search`, per point of the SLO search: runners/load/search.py): closed
   loop (N workers, each sends its next request when its last one ends) or open loop
   (requests leave on a seeded timetable; each is also timed from its *scheduled* send, so
   a generator that falls behind cannot hide queueing: coordinated omission, Gil Tene,
   "How NOT to Measure Latency"; both in runners/load/loops.py). Every request is a fresh
   calibrated prompt, streamed and classified by `run_request` like any bench request, and
   logged with its level. An open-loop level stops early once its latency grows without
   bound (analysis/saturation.py): nothing more is sent and the requests in flight are
   cancelled;
4. "level" records bracket each level with its wall time and the generator's own CPU time
   (the event-loop thread's `thread_time_ns`), so a report can say when the generator, not
   the engine, was the limit. Probe samples are logged with the ids of the requests in flight.

The analysis (analysis/load.py) reads the log alone, so `llmtop report` renders a sweep too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from time import perf_counter_ns, thread_time_ns
from typing import Any

from llmtop.engines.base import Engine
from llmtop.engines.connection import Connection
from llmtop.probes.config import load_thresholds
from llmtop.probes.sampler import ProbeSample, ProbeSampler
from llmtop.sessions.analysis.load import LevelResult, analyze_load
from llmtop.sessions.analysis.saturation import over_saturated
from llmtop.sessions.analysis.search import SearchResult
from llmtop.sessions.measure.config import LoadConfig
from llmtop.sessions.measure.dataset import Dataset
from llmtop.sessions.measure.prompts import PromptGenerator, run_salt
from llmtop.sessions.measure.request import TOKEN_TIMEOUT_S, RequestResult
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.records.schema import (
    CalibrationRecord,
    InterruptedRecord,
    LevelRecord,
    SaturationStop,
)
from llmtop.sessions.runners.calibration import CalibrationCache, calibrate
from llmtop.sessions.runners.energy import EnergyMeter, local_meter
from llmtop.sessions.runners.environment import (
    PROBE_INTERVAL_S,
    engine_parallelism,
    environment_record,
    preflight_record,
)
from llmtop.sessions.runners.load.loops import LEAD_NS, Prepared, Prompt, closed_loop, open_loop
from llmtop.sessions.runners.load.progress import LoadOutcome, LoadProgress, pooled_engine
from llmtop.sessions.runners.load.search import run_search
from llmtop.sessions.runners.load.server_metrics import ServerWatch
from llmtop.sessions.runners.recorder import NO_FIELDS, RequestFields, SessionRecorder
from llmtop.stamping.stamps import TIMER_EARLY_NS, released_at

OPEN_LOOP_WARMUP = 4  # concurrent warm-up requests before an open loop's first level

__all__ = ["LoadOutcome", "LoadProgress", "LoadRunner", "pooled_engine"]


class LoadRunner:
    """Runs one sweep on a connection, writing a "load" session log.

    token_timeout_s: each request's time without a token before it ends stalled (s).
    dataset: the user's requests (measure/dataset.py) in place of calibrated prompts (no
    calibration): the warm-up and each level take its records in file order from the first
    (from the start again past the last), each cache-busted unless `measure_cache`.
    send_early_ns: how long before an open-loop send its hold leaves asyncio's timer
    (stamps.sleep_until; a replay's is longer).
    Raises LogError (log not writable) and CalibrationError (prompt size unreachable). A
    preflight verdict is recorded, never a reason to refuse: a sweep on a NOISY machine says
    so per level (the probes' verdict column).
    """

    send_early_ns = TIMER_EARLY_NS

    def __init__(
        self,
        conn: Connection,
        config: LoadConfig,
        log_path: str | None = None,
        on_progress: Callable[[LoadProgress], None] | None = None,
        energy: EnergyMeter | None = None,
        token_timeout_s: float = TOKEN_TIMEOUT_S,
        dataset: Dataset | None = None,
    ) -> None:
        if dataset is not None:  # which traffic was measured: the file's name, size, digest
            config = replace(config, dataset=dataset.identity())
        self.conn = conn
        self.config = config
        self.dataset = dataset
        self._tags = 0  # dataset requests tagged so far (each send's tag is its own)
        self.on_progress = on_progress or (lambda _p: None)
        # this machine's energy: per level, since concurrent requests share the machine
        self.energy = energy or local_meter(conn.upstream.host)
        self._level_results: list[RequestResult] = []
        self.recorder = SessionRecorder(
            conn,
            config.options(),
            log_path,
            kind="load",
            extra_header={"load": config.to_dict()},
            think=config.think,
            write_behind=True,  # fsync'd in a thread: a worker sends its next request at once
            energy=self.energy,
            energy_per_request=False,
            token_timeout_s=token_timeout_s,
        )
        self.engine: Engine = conn.engine
        self.level: int | None = None
        self._done = 0
        self._total: int | None = None
        self._sent = 0  # measured requests sent in the level running
        self.level_records: list[RequestRecord] = []  # the level's, as logged (the search's)
        self.stopped: SaturationStop | None = None  # the level running was over-saturated
        self._stop_event = asyncio.Event()
        self.expected_tokens: float | None = None  # the calibrated prompt's server count
        self.search: SearchResult | None = None
        self.salt = run_salt()  # new prompts in every run: a server's prompt cache outlives it

    @property
    def log_path(self) -> str:
        """Where the sweep is logged."""
        return str(self.recorder.log.path)

    async def run(self) -> LoadOutcome:
        """Run the whole sweep; the log is closed when this returns or raises."""
        sampler = ProbeSampler(
            PROBE_INTERVAL_S,
            self._probe,
            engine_pids=lambda: self.conn.engine_pids,
            thresholds=load_thresholds(),
            energy=self.energy.reader,
        )
        self.engine, owned = pooled_engine(self.conn, self.config)
        interrupted = False
        sampler.start()
        try:
            words = await self._prepare()
            generator = PromptGenerator(self.config.seed, salt=self.salt)
            await self._warm_up(words, generator)
            if self.config.search:
                self.search = await run_search(self, words, generator)
            else:
                for index, value in enumerate(self.config.levels):
                    await self.run_level(index, value, words, generator)
            self.recorder.log.write(await environment_record(self.conn, "end"))
        except asyncio.CancelledError:
            interrupted = True
            self.recorder.log.write(InterruptedRecord(datetime.now().astimezone().isoformat()))
            raise
        finally:
            sampler.stop()
            self.recorder.close()
            if owned:
                await self.engine.aclose()
        outcome = LoadOutcome(analyze_load(self.log_path), self.log_path, interrupted)
        self.on_progress(LoadProgress("done", message="done"))
        return outcome

    async def _prepare(self) -> int:
        """Environment, preflight, the load request and calibration; returns the word count
        of the calibrated prompt size."""
        cfg = self.config
        self.on_progress(LoadProgress("environment", message="reading the engine's environment"))
        parallel = await asyncio.to_thread(engine_parallelism, self.conn)
        self.recorder.log.write(await environment_record(self.conn, "start", parallel=parallel,
                                                         prompt_salt=self.salt))
        if cfg.preflight_s > 0:
            self.on_progress(
                LoadProgress("preflight", message=f"preflight: sampling {cfg.preflight_s:g} s")
            )
            idle_from = self.energy.sample()
            preflight = await preflight_record(self.conn, cfg.preflight_s)
            idle_to = self.energy.sample("end")
            self.recorder.log.write(preflight)
            for record in self.energy.measure_idle(idle_from, idle_to):
                self.recorder.log.write(record)
            self.on_progress(LoadProgress("preflight", message=f"preflight {preflight.verdict}"))
        self.on_progress(
            LoadProgress("warmup", message="first request (pays the model load, if any)")
        )
        await self._request("Hello", {"phase": "load", "index": 0}, options={"num_predict": 2})
        return await self._size_prompts()

    async def _size_prompts(self) -> int:
        """Calibrate the prompt size; returns its word count (0 for a dataset's requests,
        whose sizes are the server's counts)."""
        cfg = self.config
        if self.dataset is not None:
            return 0
        target = cfg.prompt_tokens
        if target is None:  # sized in words: the Locust user class's config, not this runner's
            raise ValueError("a sweep llmtop sends sizes its prompts in tokens (prompt_tokens)")
        self.on_progress(LoadProgress("calibrating", message="calibrating the prompt size"))
        calibration = await calibrate(
            self.conn.engine,
            self.conn.model,
            [target],
            {**cfg.options(), "num_predict": 1},
            seed=cfg.seed,
            cache=CalibrationCache() if cfg.use_cache else None,
            think=cfg.think,
        )
        self.recorder.log.write(CalibrationRecord.of(calibration.to_dict()))
        point = calibration.targets[target]
        self.on_progress(
            LoadProgress(
                "calibrating",
                message=f"calibration: {target} tok → "
                f"{point.words} words ({point.tokens})",
            )
        )
        self.expected_tokens = point.tokens
        return point.words

    async def _warm_up(self, words: int, generator: PromptGenerator) -> None:
        """One round of concurrent requests before the first level (phase "warmup", kept in
        the log, in no level): it opens the pool's connections and runs the code paths a
        fresh process runs slowly the first time, which would otherwise land in level 1."""
        cfg = self.config
        n = int(max(cfg.levels)) if cfg.mode == "concurrency" else OPEN_LOOP_WARMUP
        self.on_progress(
            LoadProgress("warmup", message=f"warm-up: {n} concurrent requests, kept apart")
        )
        fields = {"phase": "warmup", **self._size_fields(words)}
        make_prompt = self.prompt_source(words, generator)
        await asyncio.gather(
            *(self._request(make_prompt(), {**fields, "index": k}) for k in range(n))
        )

    def _size_fields(self, words: int) -> dict[str, Any]:
        """A request record's calibrated size (none for a dataset's requests)."""
        if self.dataset is not None:
            return {}
        return {"prompt_tokens_target": self.config.prompt_tokens, "prompt_words": words}

    def prompt_source(self, words: int, generator: PromptGenerator) -> Callable[[], Prompt]:
        """Where a level's (or the warm-up's) prompts come from: the generator's calibrated
        prompts, or the dataset's records from its first, each tagged with a tag of its own
        (the run's salt and a count) unless the config's `measure_cache`."""
        dataset = self.dataset
        if dataset is None:
            return lambda: generator.make(words)
        position = iter(range(1 << 62))

        def make() -> Prompt:
            record = dataset.pick(next(position))
            self._tags += 1
            messages = (record.messages if self.config.measure_cache
                        else record.busted(f"{self.salt}-{self._tags}"))
            options = dict(record.options)
            if record.max_tokens is not None:
                options["num_predict"] = record.max_tokens
            return Prepared(messages[-1]["content"], messages[:-1], options,
                            {"dataset_line": record.line})
        return make

    async def run_level(
        self, index: int, value: float, words: int, generator: PromptGenerator,
        repeat: Callable[[int], bool] | None = None,
    ) -> LevelResult | None:
        """Run level `index` (concurrency or rate `value`) between a "level" start record and
        an end record with its wall time, the loop thread's CPU time, its repeats and its
        over-saturation stop; then report its LevelResult (analysed from the log, as a report
        would) and return it. repeat(batches run so far): whether to run another batch of the
        level's requests (the SLO search's rule, runners/load/search.py); None runs one."""
        cfg = self.config
        total = cfg.requests
        if total is None and cfg.mode == "rate":
            total = max(1, round(value * (cfg.duration_s or 0)))
        self.level, self.recorder.peak_streaming, self._done = index, 0, 0
        self._total = total
        self.recorder.log.write(LevelRecord(
            "start", index, value, mode=cfg.mode, requests=total, duration_s=cfg.duration_s
        ))
        where = (f"search point {index + 1}" if cfg.search
                 else f"level {index + 1}/{len(cfg.levels)}")
        self.on_progress(LoadProgress("level", index, value, total=total,
                                      message=f"{where}: {cfg.level_label(value)}"))
        fields = {"phase": "measure", "level": index, **self._size_fields(words)}
        self._level_results, self.level_records, self._sent = [], [], 0
        self.stopped, self._stop_event = None, asyncio.Event()
        numbers = [0]  # the level's next request index, across its batches
        watch = ServerWatch(getattr(self.conn.upstream, "server_metrics", None))
        watch.start()  # llama-server's /metrics: its own queue while the level runs
        energy_from = self.energy.sample()
        cpu0, wall_ns, repeats = thread_time_ns(), 0, 0
        while True:
            repeats += 1
            # an open loop's first request starts LEAD_NS early (runners/load/loops.py): its
            # schedule begins then, so its first send is not late by its own preparation
            t0 = perf_counter_ns() + (LEAD_NS if cfg.mode == "rate" else 0)
            await self._batch(value, total, repeats, t0, numbers, fields,
                              self.prompt_source(words, generator))
            wall_ns += perf_counter_ns() - t0
            if self.stopped is not None or repeat is None or not repeat(repeats):
                break
        cpu_ns = thread_time_ns() - cpu0
        server = await watch.stop()
        energy_to = self.energy.sample("end")
        await self.recorder.drain()
        for record in self.energy.span("level", energy_from, energy_to, self._level_results,
                                       level=index):
            self.recorder.log.write(record)
        self.recorder.log.write(LevelRecord(
            "end", index, value, wall_ns=wall_ns, generator_cpu_ns=cpu_ns,
            max_in_flight=self.recorder.peak_streaming, repeats=repeats, stopped=self.stopped,
            server_metrics=server,
        ))
        self.level = None
        result = analyze_load(self.log_path).level(index)
        self.on_progress(
            LoadProgress("level-done", index, value, done=self._done, total=total, result=result)
        )
        return result

    async def _batch(
        self, value: float, total: int | None, repeat: int, t0: int,
        numbers: list[int], fields: dict[str, Any], make_prompt: Callable[[], Prompt],
    ) -> None:
        """One batch of a level: closed loop (indices from `numbers[0]` up to repeat × total) or
        open loop (its own seeded timetable of `total` requests); an open loop's batch ends
        early when the over-saturation rule fires (`self.stopped`)."""
        cfg = self.config
        if cfg.mode == "concurrency":
            limit = None if total is None else repeat * total
            await closed_loop(self._request, int(value), limit, t0, cfg.duration_s, fields,
                              make_prompt, numbers)
            return
        assert total is not None
        seed = cfg.seed + (self.level or 0) + 1000 * (repeat - 1)
        run = asyncio.ensure_future(
            open_loop(self._request, value, total, t0, cfg.arrivals, fields, make_prompt,
                      (repeat - 1) * total, seed, lambda: self.stopped is not None)
        )
        stop = asyncio.ensure_future(self._stop_event.wait())
        try:
            await asyncio.wait({run, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not run.done():  # stopped (or we are cancelled): what is in flight is cancelled
                run.cancel()
            await asyncio.gather(run, stop, return_exceptions=True)

    async def _request(
        self,
        prompt: Prompt,
        fields: dict[str, Any],
        *,
        t0: int | None = None,
        scheduled_ns: int | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        """Stream one request, log it with `fields` plus its send offset from t0 (and its
        scheduled offset and lag, open loop)."""

        def late(result: RequestResult) -> RequestFields:
            if t0 is None:
                return NO_FIELDS
            if scheduled_ns is None:
                return RequestFields(sent_offset_ns=result.sent_ns - t0)
            return RequestFields(sent_offset_ns=result.sent_ns - t0,
                                 scheduled_offset_ns=scheduled_ns - t0,
                                 lag_ms=(result.sent_ns - scheduled_ns) / 1e6)

        measured = fields.get("phase") == "measure"
        if measured and self.stopped is not None:
            return  # the level was stopped between this task's creation and its start
        self._sent += measured
        history: Sequence[Mapping[str, Any]] = ()
        if isinstance(prompt, Prepared):  # a request from a file: its chat, options, fields
            options = {**prompt.options, **(options or {})}
            fields = {**fields, **prompt.fields}
            history, prompt = prompt.history, prompt.prompt
        # an open loop's send leaves at its scheduled moment
        with released_at(scheduled_ns, self.send_early_ns):
            result, record = await self.recorder.measure(
                prompt, engine=self.engine, options={**self.recorder.options, **(options or {})},
                late=late, history=history, fields=RequestFields(**fields),
            )
        if measured:
            self.level_records.append(record)
            if result.status == "ok":
                self._level_results.append(result)  # its tokens count in the level's J/token
                self._check_saturation(scheduled_ns is not None)
        self._done += 1
        streaming = len(self.recorder.streaming)
        self.on_progress(
            LoadProgress("request", self.level, None, streaming, self._done, self._total,
                         record=record)
        )

    def _check_saturation(self, open_loop: bool) -> None:
        """Stop an open-loop level once its TTFT from the schedule grows without bound
        (analysis/saturation.py); a closed loop's latency is bounded, so never there."""
        if not open_loop or not self.config.early_stop or self.stopped is not None:
            return
        points = [(r.plan.index or 0, ttft + (r.load.lag_ms or 0.0)) for r in self.level_records
                  if r.status == "ok" and (ttft := r.metrics.ttft_ms) is not None]
        stop = over_saturated(points, self._sent)
        if stop is not None:
            self.stopped = stop
            self._stop_event.set()

    def _probe(self, sample: ProbeSample) -> None:
        """Log a probe sample with the level and the ids in flight (sampler thread)."""
        self.recorder.log.write_probe(
            sample.to_dict(), None, level=self.level, request_ids=sorted(self.recorder.streaming)
        )
