"""The bench screen's form → a `BenchConfig`, and where the bench log goes (pure: no Textual).

The bench log sits next to the TUI's session log and is named after it
(`s.jsonl` → `s.bench-20250101-120000.jsonl`), so the two files are visibly one session; the
session log also gets a `bench` record pointing at it (see `BenchScreen`).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from pathlib import Path

from llmtop.sessions.measure.config import BenchConfig
from llmtop.tui.state.settings import TuiSettings

MIN_MAX_TOKENS = 2  # a decode rate needs two output tokens (as `llmtop bench`)


class BenchFormError(ValueError):
    """A form value that cannot run; the message names the field and what it accepts."""


def _int(field: str, text: str, minimum: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise BenchFormError(f"{field}: {text.strip()!r} is not a whole number") from None
    if value < minimum:
        raise BenchFormError(f"{field} must be ≥ {minimum}, got {value}")
    return value


def parse_prompt_tokens(text: str) -> tuple[int, ...]:
    """ "200" or "200, 1000" (commas or spaces) → (200,) / (200, 1000), tokens, each ≥ 1."""
    parts = [p for p in text.replace(",", " ").split() if p]
    if not parts:
        raise BenchFormError("prompt tokens: give at least one size, e.g. 200 or 200,1000")
    sizes = tuple(_int("prompt tokens", p, 1) for p in parts)
    if len(set(sizes)) != len(sizes):
        raise BenchFormError(f"prompt tokens: {text.strip()!r} repeats a size")
    return sizes


def config_from_form(
    settings: TuiSettings, requests: str, warmup: str, prompt_tokens: str, max_tokens: str,
    cache_pairs: str = "0", turns: str = "0",
) -> BenchConfig:
    """The form's fields on top of the session's fixed options (temperature, seed, num_ctx
    from `settings.options`); cache pairs and turns run after the sweep, as `llmtop bench
    --cache-pairs N --turns N` (the turns with their cold replay). Raises BenchFormError for
    a value that cannot run."""
    config = BenchConfig.from_options(
        settings.options,
        requests=_int("requests", requests, 1),
        warmup=_int("warm-up", warmup, 0),
        prompt_tokens=parse_prompt_tokens(prompt_tokens),
        max_tokens=_int("max tokens", max_tokens, MIN_MAX_TOKENS),
        use_cache=settings.bench_use_cache,
        cache_pairs=_int("cache pairs", cache_pairs, 0),
        turns=_int("conversation turns", turns, 0),
    )
    if settings.bench_preflight_s is not None:
        config = dataclasses.replace(config, preflight_s=settings.bench_preflight_s)
    return config


def form_defaults(settings: TuiSettings) -> dict[str, str]:
    """The form's initial texts, by field id."""
    return {
        "requests": str(settings.bench_requests),
        "warmup": str(settings.bench_warmup),
        "prompt-tokens": ", ".join(str(t) for t in settings.bench_prompt_tokens),
        "max-tokens": str(settings.bench_max_tokens),
        "cache-pairs": "0",
        "turns": "0",
    }


def bench_log_path(session_log: str | Path, now: datetime | None = None) -> Path:
    """A new file next to the session log: `<stem>.bench-<YYYYmmdd-HHMMSS>[-n].jsonl`."""
    session = Path(session_log)
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    path = session.with_name(f"{session.stem}.bench-{stamp}.jsonl")
    n = 2
    while path.exists():
        path = session.with_name(f"{session.stem}.bench-{stamp}-{n}.jsonl")
        n += 1
    return path
