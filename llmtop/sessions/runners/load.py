"""`llmtop load`: concurrency and request-rate sweeps over one engine, on one event loop.

Order of a run (the bench protocol where it applies, docs/method.md, "The bench run"):
1. the environment record, with the engine's parallel slots where it reveals them;
2. an optional preflight, one load request (the model's load lands there), calibration of the
   prompt size against the server's token counts (calibration.py), and one warm-up round of
   concurrent requests (kept in the log, in no level);
3. per level: closed loop (N workers, each sends its next request when its last one ends) or
   open loop (requests leave on a seeded timetable; each is also timed from its *scheduled*
   send, so a generator that falls behind cannot hide queueing: coordinated omission, Gil
   Tene, "How NOT to Measure Latency"). Every request is a fresh calibrated prompt, streamed
   and classified by `run_request` like any bench request, and logged with its level;
4. "level" records bracket each level with its wall time and the generator's own CPU time
   (the event-loop thread's `thread_time_ns`), so a report can say when the generator, not
   the engine, was the limit. Probe samples are logged with the ids of the requests in flight.

The analysis (load_analysis.py) reads the log alone, so `llmtop report` renders a sweep too.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from time import perf_counter_ns, thread_time_ns
from typing import Any

import httpx

from llmtop.engines.base import Engine
from llmtop.engines.connection import Connection
from llmtop.engines.ollama import OllamaEngine
from llmtop.probes.config import load_thresholds
from llmtop.probes.sampler import ProbeSample, ProbeSampler
from llmtop.sessions.analysis.load import LevelResult, LoadAnalysis, analyze_load
from llmtop.sessions.measure.prompts import PromptGenerator, run_salt
from llmtop.sessions.measure.request import RequestResult
from llmtop.sessions.records.schema import (
    CalibrationRecord,
    InterruptedRecord,
    LevelRecord,
    RequestRecord,
)
from llmtop.sessions.runners.calibration import CalibrationCache, calibrate
from llmtop.sessions.runners.energy import EnergyMeter, local_meter
from llmtop.sessions.runners.environment import (
    PROBE_INTERVAL_S,
    engine_parallelism,
    environment_record,
    preflight_record,
)
from llmtop.sessions.runners.load_config import LoadConfig, arrival_offsets
from llmtop.sessions.runners.recorder import SessionRecorder
from llmtop.sessions.runners.server_watch import ServerWatch

OPEN_LOOP_WARMUP = 4  # concurrent warm-up requests before an open loop's first level
OPEN_LOOP_KEEPALIVE = 256  # idle connections an open loop keeps for reuse (no cap on open ones)


@dataclass(frozen=True)
class LoadProgress:
    """Where the sweep is. phase: "environment", "preflight", "warmup", "calibrating",
    "level" (a level starts), "request" (one finished: `record`), "level-done"
    (`result`: its LevelResult), "done". level: index into the config's levels; value: its
    concurrency or rate; in_flight: requests streaming now; done/total: requests of the level
    finished / planned (total None for a closed loop run by duration)."""

    phase: str
    level: int | None = None
    value: float | None = None
    in_flight: int = 0
    done: int = 0
    total: int | None = None
    record: RequestRecord | None = None
    result: LevelResult | None = None
    message: str = ""


@dataclass
class LoadOutcome:
    """A finished sweep: its analysis (per level, the knee) and the log path."""

    analysis: LoadAnalysis
    log_path: str
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)


def pooled_engine(conn: Connection, config: LoadConfig) -> tuple[Engine, bool]:
    """The client the sweep streams through, and whether the runner must close it.

    An Ollama-API client gets its own connection pool sized to the highest concurrency (so no
    request waits for a connection, and none is re-opened between requests: httpx keeps only
    20 alive by default); an open loop's pool has no cap, since the timetable, not the pool,
    decides how many requests are in flight. Other clients (the relay) are used as they are.
    """
    engine = conn.engine
    if not isinstance(engine, OllamaEngine):
        return engine, False
    if config.mode == "concurrency":
        size = int(max(config.levels))
        limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
    else:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=OPEN_LOOP_KEEPALIVE)
    return OllamaEngine(
        engine.host, name=engine.name, read_timeout_s=engine.read_timeout_s, limits=limits
    ), True


class LoadRunner:
    """Runs one sweep on a connection, writing a "load" session log.

    Raises LogError (log not writable) and CalibrationError (prompt size unreachable). A
    preflight verdict is recorded, never a reason to refuse: a sweep on a NOISY machine says
    so per level (the probes' verdict column).
    """

    def __init__(
        self,
        conn: Connection,
        config: LoadConfig,
        log_path: str | None = None,
        on_progress: Callable[[LoadProgress], None] | None = None,
        energy: EnergyMeter | None = None,
    ) -> None:
        self.conn = conn
        self.config = config
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
        )
        self.engine: Engine = conn.engine
        self.level: int | None = None
        self._done = 0
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
            for index, value in enumerate(self.config.levels):
                await self._level(index, value, words, generator)
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
        self.on_progress(LoadProgress("calibrating", message="calibrating the prompt size"))
        calibration = await calibrate(
            self.conn.engine,
            self.conn.model,
            [cfg.prompt_tokens],
            {**cfg.options(), "num_predict": 1},
            seed=cfg.seed,
            cache=CalibrationCache() if cfg.use_cache else None,
            think=cfg.think,
        )
        self.recorder.log.write(CalibrationRecord.of(calibration.to_dict()))
        point = calibration.targets[cfg.prompt_tokens]
        self.on_progress(
            LoadProgress(
                "calibrating",
                message=f"calibration: {cfg.prompt_tokens} tok → "
                f"{point.words} words ({point.tokens})",
            )
        )
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
        fields = {
            "phase": "warmup",
            "prompt_tokens_target": cfg.prompt_tokens,
            "prompt_words": words,
        }
        await asyncio.gather(
            *(self._request(generator.make(words), {**fields, "index": k}) for k in range(n))
        )

    async def _level(
        self, index: int, value: float, words: int, generator: PromptGenerator
    ) -> None:
        """Run level `index` (concurrency or rate `value`) between a "level" start record and
        an end record with its wall time and the loop thread's CPU time; then report its
        LevelResult (analysed from the log, as a report would)."""
        cfg = self.config
        total = cfg.requests
        if total is None and cfg.mode == "rate":
            total = max(1, round(value * (cfg.duration_s or 0)))
        self.level, self.recorder.peak_streaming, self._done = index, 0, 0
        self.recorder.log.write(LevelRecord(
            "start", index, value, mode=cfg.mode, requests=total, duration_s=cfg.duration_s
        ))
        self.on_progress(
            LoadProgress(
                "level",
                index,
                value,
                total=total,
                message=f"level {index + 1}/{len(cfg.levels)}: {cfg.level_label(value)}",
            )
        )
        fields = {
            "phase": "measure",
            "level": index,
            "prompt_tokens_target": cfg.prompt_tokens,
            "prompt_words": words,
        }
        self._level_results = []
        watch = ServerWatch(getattr(self.conn.upstream, "server_metrics", None))
        watch.start()  # llama-server's /metrics: its own queue while the level runs
        energy_from = self.energy.sample()
        cpu0, t0 = thread_time_ns(), perf_counter_ns()
        if cfg.mode == "concurrency":
            await self._closed(int(value), total, t0, fields, lambda: generator.make(words))
        else:
            assert total is not None
            await self._open(value, total, t0, fields, lambda: generator.make(words))
        wall_ns, cpu_ns = perf_counter_ns() - t0, thread_time_ns() - cpu0
        server = await watch.stop()
        energy_to = self.energy.sample("end")
        await self.recorder.drain()
        for record in self.energy.span("level", energy_from, energy_to, self._level_results,
                                       level=index):
            self.recorder.log.write(record)
        self.recorder.log.write(LevelRecord(
            "end", index, value, wall_ns=wall_ns, generator_cpu_ns=cpu_ns,
            max_in_flight=self.recorder.peak_streaming, server_metrics=server,
        ))
        self.level = None
        result = analyze_load(self.log_path).level(index)
        self.on_progress(
            LoadProgress("level-done", index, value, done=self._done, total=total, result=result)
        )

    async def _closed(
        self,
        workers: int,
        total: int | None,
        t0: int,
        fields: dict[str, Any],
        make_prompt: Callable[[], str],
    ) -> None:
        """N workers; each takes the next index until `total` are taken (or, by duration, until
        the level's time is up) and sends its next request when its last one ended."""
        numbers = itertools.count()
        deadline = t0 + round((self.config.duration_s or 0) * 1e9)

        async def worker() -> None:
            while True:
                k = next(numbers)
                if (total is not None and k >= total) or (
                    total is None and perf_counter_ns() >= deadline
                ):
                    return
                await self._request(make_prompt(), {**fields, "index": k}, t0=t0, total=total)

        await asyncio.gather(*(worker() for _ in range(workers)))

    async def _open(
        self,
        rate: float,
        total: int,
        t0: int,
        fields: dict[str, Any],
        make_prompt: Callable[[], str],
    ) -> None:
        """Send request k at t0 + offset_k whatever is in flight; each runs in its own task."""
        offsets = arrival_offsets(
            rate, total, self.config.arrivals, self.config.seed + (self.level or 0)
        )
        tasks = []
        for k, offset in enumerate(offsets):
            scheduled = t0 + round(offset * 1e9)
            wait_ns = scheduled - perf_counter_ns()
            if wait_ns > 0:
                await asyncio.sleep(wait_ns / 1e9)
            tasks.append(
                asyncio.create_task(
                    self._request(
                        make_prompt(),
                        {**fields, "index": k},
                        t0=t0,
                        scheduled_ns=scheduled,
                        total=total,
                    )
                )
            )
        await asyncio.gather(*tasks)

    async def _request(
        self,
        prompt: str,
        fields: dict[str, Any],
        *,
        t0: int | None = None,
        scheduled_ns: int | None = None,
        total: int | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        """Stream one request, log it with `fields` plus its send offset from t0 (and its
        scheduled offset and lag, open loop)."""

        def late(result: RequestResult) -> dict[str, Any]:
            if t0 is None:
                return {}
            if scheduled_ns is None:
                return {"sent_offset_ns": result.sent_ns - t0}
            return {"sent_offset_ns": result.sent_ns - t0,
                    "scheduled_offset_ns": scheduled_ns - t0,
                    "lag_ms": (result.sent_ns - scheduled_ns) / 1e6}

        result, record = await self.recorder.measure(
            prompt, engine=self.engine, options={**self.recorder.options, **(options or {})},
            late=late, **fields,
        )
        if fields.get("phase") == "measure" and result.status == "ok":
            self._level_results.append(result)  # its tokens count in the level's J/token
        self._done += 1
        streaming = len(self.recorder.streaming)
        self.on_progress(
            LoadProgress("request", self.level, None, streaming, self._done, total, record=record)
        )

    def _probe(self, sample: ProbeSample) -> None:
        """Log a probe sample with the level and the ids in flight (sampler thread)."""
        self.recorder.log.write_probe(
            sample.to_dict(), None, level=self.level, request_ids=sorted(self.recorder.streaming)
        )
