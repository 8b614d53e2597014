"""`llmtop load --search`: run the SLO search's points (the rule: analysis/search.py).

Each point is one level of the sweep's log (its index in the order run). A point runs one
batch of the level's requests (`--requests`, or `--duration`), and another while the 95 %
Wilson interval of its SLO share straddles the target and fewer than MAX_REPEATS batches
ran; the level's end record counts its batches (`repeats`). Between batches the verdict is
computed from the level's records as logged (analysis/load.py's `level_result`, the same
function a report uses), so the runner and `llmtop report` agree. An open-loop point the
over-saturation rule stopped is a miss at once (no repeat).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from llmtop.sessions.analysis.load import LevelResult, level_result, verdict
from llmtop.sessions.analysis.search import MAX_REPEATS, SearchResult, SloSearch, judge
from llmtop.sessions.measure.config import LoadConfig
from llmtop.sessions.measure.prompts import PromptGenerator
from llmtop.sessions.records.request import RequestRecord


class LevelRunner(Protocol):
    """What the search needs of the sweep's runner (runner.LoadRunner has it): the config
    (mode, levels, SLO), the current level's request records as logged and the calibrated
    prompt's token count (None: uncalibrated), and a way to run one level. A protocol, so
    this module needs nothing of runner.py, which imports it."""

    @property
    def config(self) -> LoadConfig: ...

    @property
    def level_records(self) -> list[RequestRecord]: ...

    @property
    def expected_tokens(self) -> float | None: ...

    async def run_level(
        self, index: int, value: float, words: int, generator: PromptGenerator,
        repeat: Callable[[int], bool] | None = None,
    ) -> LevelResult | None: ...


async def run_search(runner: LevelRunner, words: int, generator: PromptGenerator
                     ) -> SearchResult:
    """Bisect between the config's lowest and highest level, running each point on `runner`
    (`LoadRunner.run_level`); returns the answer (also what `analyze_load` replays from the
    log). Raises what run_level raises (CancelledError when stopped)."""
    cfg = runner.config
    search = SloSearch(cfg.mode, min(cfg.levels), max(cfg.levels))
    index = 0
    while (value := search.next_value()) is not None:

        def again(repeats: int, index: int = index, value: float = value) -> bool:
            if repeats >= MAX_REPEATS:
                return False
            now = level_result(index, cfg.mode, value, runner.level_records, [], None,
                               cfg.slo, runner.expected_tokens)
            return judge(value, now.slo_met or 0, now.requests, repeats).outcome == "undecided"

        result = await runner.run_level(index, value, words, generator, repeat=again)
        if result is None:  # the level left no record: nothing to judge, stop searching
            break
        search.add(verdict(result))
        index += 1
    return search.result(cfg.slo)
