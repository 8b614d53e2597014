"""The prefill the user waits for: what the saved curve of this model predicts for the prompt
being sent, and how long it has waited (pure: no Textual, no clocks; the app passes the
elapsed time in).

The prediction comes from the last bench sweep's curve (sessions/runners/curves.py): the
prompt's tokens are estimated from its words with the sweep calibration's tokens per word
and template tokens, then `Curve.predict`. Without a saved curve nothing is predicted (the
screen says "streaming…" as before).

Where the engine reports its prompt processing as it goes (llama-server's `prompt_progress`,
asked for with `return_progress`: engines/openai.py), the line shows the server's own count
instead (`progress_text`), with the prediction beside it when there is one. A progress chunk
carries no text, so it never starts TTFT.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmtop.engines.events import PromptProgress

if TYPE_CHECKING:  # the curve store (json, datetime, the fit) loads with the first prompt
    from llmtop.sessions.runners.curves import SavedCurve


@dataclass(frozen=True)
class PrefillExpectation:
    """The predicted prefill of one prompt: `tokens` (estimated), `expected_ms`, and the
    curve's `label` ("your curve from 2026-12-01 (…)")."""

    tokens: int
    expected_ms: float
    label: str


def expectation_for(saved: SavedCurve | None, prompt: str) -> PrefillExpectation | None:
    """The saved curve's prediction for a chat with `prompt` (None without a curve or a
    tokens-per-word ratio, or when the curve predicts nothing positive)."""
    if saved is None:
        return None
    tokens = saved.prompt_tokens(prompt)
    if tokens is None:
        return None
    expected = saved.curve.predict(tokens)
    if not expected > 0:
        return None
    return PrefillExpectation(tokens, expected, saved.label.split(" (")[0])


def _seconds(ms: float) -> str:
    return f"{ms / 1000:.1f} s" if ms >= 1000 else f"{ms:.0f} ms"


def waiting_text(expected: PrefillExpectation, waited_ms: float | None) -> str:
    """'prefill ≈ 1.9 s expected for ~2,000 tokens · 1.4 s so far (your curve from
    2026-12-01)' (without the wait before the request was sent); past the prediction it says
    by how much."""
    text = f"prefill ≈ {_seconds(expected.expected_ms)} expected for ~{expected.tokens:,} tokens"
    if waited_ms is not None:
        text += f" · {_seconds(waited_ms)} so far"
        if waited_ms > expected.expected_ms:
            text += f", {_seconds(waited_ms - expected.expected_ms)} over"
    return f"{text} ({expected.label})"


def progress_text(progress: PromptProgress, expected: PrefillExpectation | None = None) -> str:
    """'prefill 1,024/2,000 tokens (51 %, 120 cached) in 0.8 s (the server's
    prompt_progress)', and ' · ≈ 1.9 s expected (your curve …)' with a prediction."""
    share = progress.share
    pct = f"{share:.0%}" if share is not None else "n/a"
    cached = f", {progress.cache:,} cached" if progress.cache else ""
    text = (f"prefill {progress.processed:,}/{progress.total:,} tokens ({pct}{cached}) in "
            f"{_seconds(progress.time_ms)} (the server's prompt_progress)")
    if expected is not None:
        text += f" · ≈ {_seconds(expected.expected_ms)} expected ({expected.label})"
    return text
