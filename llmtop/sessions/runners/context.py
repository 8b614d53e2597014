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
  would send a history the engine never answered. Then, unless `cold` is off, the same
  conversation replayed with the engine's cache defeated ("turn-cold"): turn k sends the
  very history and message turn k sent, its first user message opened by fresh random words,
  so no prefix the engine holds matches it and every turn is a cold prefill of the same
  context. (Not a system message: a template without a system part drops it, as Ollama's
  default `{{ .Prompt }}` does for a model with no template, the bundled one's case, and the
  replay then hit the cache: 27 ms to turn 1's first token against 230 ms, measured.)
  The replay comes after the whole conversation, not turn by turn: on a one-slot engine a
  cold twin between two turns would evict the cache the next turn relies on.

Each request goes through `SessionRecorder.measure`, with the bench's options.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from llmtop.engines.events import StreamEvent
from llmtop.sessions.measure.prompts import SEPARATOR, PromptGenerator
from llmtop.sessions.measure.request import RequestResult
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.runners.calibration import Calibration
from llmtop.sessions.runners.recorder import RequestFields, SessionRecorder

SUFFIX_WORDS = 12  # a cache pair's suffix: short, so the prefix is most of the prompt
COLD_NONCE_WORDS = 4  # the cold replay's opening: random words no prompt began with

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
                fields=RequestFields(phase=phase, pair=pair, index=pair,
                                     prompt_tokens_target=target,
                                     prompt_words=words + SUFFIX_WORDS),
            )
            on_progress(phase, pair + 1, pairs, result, record)


async def run_conversation(
    recorder: SessionRecorder,
    calibration: Calibration,
    turns: int,
    generator: PromptGenerator,
    on_progress: Progress,
    on_event: Callable[[StreamEvent], None] | None = None,
    cold: bool = True,
) -> None:
    """Send a `turns`-turn conversation, then (`cold`) its replay with the cache defeated
    (see the module's doc)."""
    target = min(calibration.targets)
    words = calibration.targets[target].words
    history: list[Mapping[str, Any]] = []
    sent: list[tuple[str, tuple[Mapping[str, Any], ...]]] = []  # each ok turn's message, history
    for turn in range(turns):
        prompt = generator.make(words)
        on_progress("turn", turn, turns, None, None)
        result, record = await recorder.measure(
            prompt,
            on_event,
            history=tuple(history),
            fields=RequestFields(phase="turn", index=turn, prompt_tokens_target=target,
                                 prompt_words=words),
        )
        on_progress("turn", turn + 1, turns, result, record)
        if record.status != "ok":
            break
        sent.append((prompt, tuple(history)))
        history += [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": result.content},
        ]
    if cold:
        await _replay_cold(recorder, sent, target, words, generator, on_progress, on_event)


async def _replay_cold(
    recorder: SessionRecorder,
    sent: list[tuple[str, tuple[Mapping[str, Any], ...]]],
    target: int,
    words: int,
    generator: PromptGenerator,
    on_progress: Progress,
    on_event: Callable[[StreamEvent], None] | None,
) -> None:
    """Each sent turn again, its first user message opened by fresh words (phase
    "turn-cold")."""
    for turn, (prompt, history) in enumerate(sent):
        nonce = _prefix(generator, COLD_NONCE_WORDS) + SEPARATOR
        if history:
            first, *rest = history
            history = ({**first, "content": nonce + str(first["content"])}, *rest)
        else:
            prompt = nonce + prompt
        on_progress("turn-cold", turn, len(sent), None, None)
        result, record = await recorder.measure(
            prompt,
            on_event,
            history=history,
            fields=RequestFields(phase="turn-cold", index=turn, prompt_tokens_target=target,
                                 prompt_words=words),
        )
        on_progress("turn-cold", turn + 1, len(sent), result, record)
        if record.status != "ok":
            return
