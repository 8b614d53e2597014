"""`llmtop load --replay WATCH_LOG`: the requests an app sent through `llmtop watch`, sent
again to the engine under test, and each compared with its original (the trace and the
comparison: analysis/replay.py; their text: reports/replay.py). The replay sends:

* with bodies, the recorded text as one user message (the watch keeps the last user
  message, not the chat before it: the original's prompt count may be larger, which the
  per-request table shows); without, a prompt of llmtop's random words sized to the
  original's server prompt count by one calibration (tokens per word and the template's
  tokens, calibration.py), said in the report;
* the original's options (OpenAI fields mapped to Ollama's: max_tokens → num_predict), with
  num_predict set to the original's output token count so both answers are as long;
* open loop at the recorded gaps divided by `speed` (load_loops.open_loop: each send held to
  its scheduled nanosecond, so the reproduced gaps are measured, `arrival_errors_ms`), or back
  to back (one request at a time, each when the last ended).

Only the originals that ended ok are replayed (the others are counted). The log is a sweep
log of one level (`llmtop report` renders it); the comparison with the originals uses
compare's ratio test and verdict (analysis/compare/stats.py) over the ok pairs.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable
from typing import Any

from llmtop.engines.connection import Connection
from llmtop.sessions.analysis.replay import ReplayComparison, Trace, compare_replay
from llmtop.sessions.measure.config import LoadConfig
from llmtop.sessions.measure.prompts import PromptGenerator
from llmtop.sessions.measure.request import TOKEN_TIMEOUT_S
from llmtop.sessions.records.log import read_log
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.records.schema import CalibrationRecord
from llmtop.sessions.runners.calibration import CalibrationCache, calibrate
from llmtop.sessions.runners.load.loops import Prepared, Prompt, closed_loop, open_loop
from llmtop.sessions.runners.load.progress import LoadProgress
from llmtop.sessions.runners.load.runner import LoadRunner

OPENAI_TO_OLLAMA = {"max_tokens": "num_predict", "max_completion_tokens": "num_predict",
                    "temperature": "temperature", "top_p": "top_p", "seed": "seed",
                    "stop": "stop"}
START_S = 0.1  # s: when the replay's first request leaves, from the level's start
WARM_UP = 4  # the pool's connections opened before the replay (load/runner.OPEN_LOOP_WARMUP)
WARM_UP_TOKENS = 2  # a warm-up's num_predict: it opens a connection, its answer is not used
# How early a replayed request's task starts before its send (load/loops.LEAD_NS is 5 ms): a
# server that closes every streamed response's connection (llama-server) makes each send
# connect first, and on 2 cores shared with the engine that took 9-15 ms of 12 replayed
# requests' preparation, which a 5 ms lead put into their lag. A request's task holds nothing
# but its connection while it waits.
LEAD_NS = 50_000_000
# How early a replayed send's hold leaves asyncio's timer (stamps.sleep_until; a load sweep's
# is 1 ms): a loop busy with other streams' chunks, or a process waiting for a core the engine
# holds, woke 5-100 ms late from the timer on 2 cores; from 3 ms before, the loop's own thread
# sleeps and then spins to the moment. The other streams wait at most that long, 12 times a
# second here, and their chunks keep their kernel receive stamps meanwhile.
SEND_EARLY_NS = 3_000_000


def replay_options(rec: RequestRecord) -> dict[str, Any]:
    """The original's options in Ollama's names, num_predict its output token count."""
    options: dict[str, Any] = {}
    openai = (rec.watch.endpoint or "").startswith("/v1/")
    for key, value in rec.options.items():
        if openai:
            if key in OPENAI_TO_OLLAMA:
                options[OPENAI_TO_OLLAMA[key]] = value
        else:
            options[key] = value
    if rec.stats is not None and rec.stats.eval_count:
        options["num_predict"] = rec.stats.eval_count  # an answer as long as the original's
    return options


class ReplayRunner(LoadRunner):
    """A one-level sweep that sends a Trace's requests (module docstring); `speed` divides
    the recorded gaps; `back_to_back` sends each when the last ended."""

    send_early_ns = SEND_EARLY_NS

    def __init__(self, conn: Connection, trace: Trace, *, speed: float = 1.0,
                 back_to_back: bool = False, max_tokens: int = 100, log_path: str | None = None,
                 on_progress: Callable[[LoadProgress], None] | None = None,
                 token_timeout_s: float | None = None) -> None:
        n = len(trace.originals)
        span = trace.offsets_s[-1] if n > 1 else 0.0
        rate = (n - 1) / span * speed if span > 0 else 1.0
        config = LoadConfig(mode="concurrency" if back_to_back else "rate",
                            levels=(1,) if back_to_back else (rate,), requests=n,
                            max_tokens=max_tokens, early_stop=False,
                            replay={**trace.identity(), "speed": speed,
                                    "back_to_back": back_to_back})
        super().__init__(conn, config, log_path, on_progress,
                         token_timeout_s=token_timeout_s or TOKEN_TIMEOUT_S)
        self.trace, self.speed, self.back_to_back = trace, speed, back_to_back
        self._fit: tuple[float, float] | None = None  # (template tokens, tokens per word)

    async def _size_prompts(self) -> int:
        """Without bodies, one calibration at the originals' median prompt count (tokens
        per word and the template's tokens); with them, nothing to size."""
        if self.trace.bodies:
            return 0
        counts = [r.stats.prompt_eval_count for r in self.trace.originals
                  if r.stats is not None and r.stats.prompt_eval_count]
        target = max(8, round(statistics.median(counts))) if counts else 200
        self.on_progress(LoadProgress("calibrating", message="no bodies recorded: sizing "
                                      f"prompts to the originals' counts ({target} tokens)"))
        calibration = await calibrate(
            self.conn.engine, self.conn.model, [target],
            {**self.config.options(), "num_predict": 1}, seed=self.config.seed,
            cache=CalibrationCache(), think=self.config.think)
        self.recorder.log.write(CalibrationRecord.of(calibration.to_dict()))
        point = calibration.targets[target]
        template = calibration.template_tokens
        self._fit = (template, max(point.tokens - template, 1) / point.words)
        return point.words

    async def _warm_up(self, words: int, generator: PromptGenerator) -> None:
        """WARM_UP concurrent requests of llmtop's own cache-busted prompts (phase "warmup",
        in no level): they open the pool's connections, so no replayed send waits for a new
        one (a first send here left 4.3 ms late); the recorded prompts are not sent, which
        would put them in the engine's cache before their replay."""
        fields = {"phase": "warmup"}
        self.on_progress(LoadProgress("warmup", message=f"warm-up: {WARM_UP} concurrent "
                                      "requests of llmtop's own prompts, kept apart"))
        options = {"num_predict": WARM_UP_TOKENS}
        await asyncio.gather(*(self._request(generator.make(max(words, 8)),
                                             {**fields, "index": k}, options=options)
                               for k in range(WARM_UP)))

    def prompt_source(self, words: int, generator: PromptGenerator) -> Callable[[], Prompt]:
        """The originals in arrival order: their text, or random words of their size."""
        originals = iter(self.trace.originals)

        def make() -> Prompt:
            rec = next(originals)
            text = rec.prompt if self.trace.bodies else generator.make(self._words(rec))
            return Prepared(text, (), replay_options(rec), {"replay_of": rec.id})
        return make

    def _words(self, rec: RequestRecord) -> int:
        template, per_word = self._fit or (0.0, 1.0)
        count = rec.stats.prompt_eval_count if rec.stats else None
        return max(1, round(((count or 0) - template) / per_word))

    async def _batch(self, value: float, total: int | None, repeat: int, t0: int,
                     numbers: list[int], fields: dict[str, Any],
                     make_prompt: Callable[[], Prompt]) -> None:
        """Back to back: one worker over the trace; else the open loop at the recorded
        offsets / speed."""
        n = len(self.trace.originals)
        if self.back_to_back:
            await closed_loop(self._request, 1, n, t0, None, fields, make_prompt, numbers)
            return
        # the first send START_S after the level's start: the level's own setup and the
        # first tasks' first run are over by then (sent at once, the first two requests
        # left 7 and 16 ms late on a busy 2-core machine, the rest 0.1-0.4 ms)
        offsets = [START_S + o / self.speed for o in self.trace.offsets_s]
        await open_loop(self._request, value, n, t0, "constant", fields, make_prompt, 0, 0,
                        lambda: False, offsets=offsets, lead_ns=LEAD_NS)


async def run_replay(runner: ReplayRunner) -> tuple[ReplayComparison, str]:
    """Run the replay; its comparison and its log's path."""
    outcome = await runner.run()
    log = read_log(outcome.log_path)
    return compare_replay(runner.trace, log, runner.speed, runner.back_to_back), outcome.log_path

