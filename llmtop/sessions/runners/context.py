"""A bench's context phases, after its prompt-size sweep: prefix-cache pairs and a
conversation (docs/guide/context.md).

* Cache pairs (`--cache-pairs N`): per pair, a prefix of the largest calibrated prompt size
  that no earlier prompt started with, then a short fresh suffix ("cache-cold"); then the
  same prefix with another suffix of as many words ("cache-warm"). Both carry `pair` and the
  prefix's calibrated size as `prompt_tokens_target`, the shared tokens an inference by time
  takes when the server reports no cached count (analysis/context.py).
* A conversation (`--turns N`): each turn is a fresh user message of the smallest
  calibrated size sent after the whole history (every earlier message and answer), phase
  "turn", `index` the turn from 0. A turn that fails ends the conversation: the next one
  would send a history the engine never answered.

Each request goes through `SessionRecorder.measure`, with the bench's options.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from llmtop.engines.events import StreamEvent
from llmtop.sessions.measure.prompts import SEPARATOR, PromptGenerator
from llmtop.sessions.measure.request import RequestResult
from llmtop.sessions.records.schema import RequestRecord
from llmtop.sessions.runners.calibration import Calibration
from llmtop.sessions.runners.recorder import SessionRecorder

SUFFIX_WORDS = 12  # a cache pair's suffix: short, so the prefix is most of the prompt

Progress = Callable[[str, int, int, RequestResult | None, RequestRecord | None], None]


def _prefix(generator: PromptGenerator, words: int) -> str:
    """`words` random words that no earlier prompt of `generator` started with."""
    return generator.make(words).split(SEPARATOR)[0]


async def run_cache_pairs(
    recorder: SessionRecorder,
    calibration: Calibration,
    pairs: int,
    generator: PromptGenerator,
    on_progress: Progress,
    on_event: Callable[[StreamEvent], None] | None = None,
) -> None:
    """Send `pairs` cold/warm pairs on the largest calibrated size (see the module's doc)."""
    target = max(calibration.targets)
    words = calibration.targets[target].words
    for pair in range(pairs):
        prefix = _prefix(generator, words)
        for phase in ("cache-cold", "cache-warm"):
            prompt = prefix + SEPARATOR + generator.make(SUFFIX_WORDS)
            on_progress(phase, pair, pairs, None, None)
            result, record = await recorder.measure(
                prompt,
                on_event,
                phase=phase,
                pair=pair,
                index=pair,
                prompt_tokens_target=target,
                prompt_words=words + SUFFIX_WORDS,
            )
            on_progress(phase, pair + 1, pairs, result, record)


async def run_conversation(
    recorder: SessionRecorder,
    calibration: Calibration,
    turns: int,
    generator: PromptGenerator,
    on_progress: Progress,
    on_event: Callable[[StreamEvent], None] | None = None,
) -> None:
    """Send a `turns`-turn conversation (see the module's doc)."""
    target = min(calibration.targets)
    words = calibration.targets[target].words
    history: list[Mapping[str, Any]] = []
    for turn in range(turns):
        prompt = generator.make(words)
        on_progress("turn", turn, turns, None, None)
        result, record = await recorder.measure(
            prompt,
            on_event,
            history=tuple(history),
            phase="turn",
            index=turn,
            prompt_tokens_target=target,
            prompt_words=words,
        )
        on_progress("turn", turn + 1, turns, result, record)
        if record.status != "ok":
            return
        history += [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": result.content},
        ]
