"""Saved prefill curves: the last sweep's curve per engine and model, for the next bench's
check ("your curve from 11-30 predicts …") and the TUI's prefill prediction.

JSON at `<user cache dir>/llmtop/prefill-curves.json`: `{"format": 1, "entries": {key:
entry}}`, key `curve_key(...)`, entry `{"curve": Curve.to_dict(), "label": ...,
"saved_at": ISO time, "log": path, "tokens_per_word": float, "template_tokens": int}`. As
the calibration cache: a missing, unreadable or corrupt file reads as empty, an entry of an
unknown shape as absent, and the file is replaced atomically (temporary file, rename); a
failed write is skipped (a curve only saves a sweep).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import platformdirs

from llmtop.files import write_atomically
from llmtop.sessions.analysis.prefill import Curve, CurveError

STORE_FORMAT = 1


def default_curves_path() -> Path:
    """<user cache dir>/llmtop/prefill-curves.json (platformdirs)."""
    return Path(platformdirs.user_cache_dir("llmtop")) / "prefill-curves.json"


def curve_key(engine: str, host: str, model: str) -> str:
    """The store's key for a model on an engine at a host; the embedded engine's host is
    left out (llmtop starts it on a new free port each time)."""
    return f"{engine} {model}" if engine == "embedded" else f"{engine} {host} {model}"


@dataclass(frozen=True)
class SavedCurve:
    """One saved curve: the fit, where it came from (`label`: "your curve from 2026-11-30"),
    and what turns a prompt's words into tokens (`tokens_per_word`, `template_tokens`: the
    calibration's, for predicting a typed prompt; None when unknown)."""

    curve: Curve
    label: str
    tokens_per_word: float | None = None
    template_tokens: int | None = None

    def prompt_tokens(self, text: str) -> int | None:
        """The token count a chat with `text` should have: template + words × tokens per
        word (None without a calibration's ratio)."""
        if self.tokens_per_word is None:
            return None
        return round((self.template_tokens or 0) + len(text.split()) * self.tokens_per_word)

    def to_entry(self) -> dict[str, Any]:
        """The store's entry (the header's `bench.prior_curve` too)."""
        return {
            "curve": self.curve.to_dict(),
            "label": self.label,
            "tokens_per_word": self.tokens_per_word,
            "template_tokens": self.template_tokens,
        }

    @classmethod
    def from_entry(cls, entry: Any) -> SavedCurve:
        """Read `to_entry`'s output. Raises CurveError naming what is wrong."""
        if not isinstance(entry, dict):
            raise CurveError("a saved curve entry must be a JSON object")
        tpw, template = entry.get("tokens_per_word"), entry.get("template_tokens")
        return cls(
            Curve.from_dict(entry.get("curve")),
            str(entry.get("label") or "a saved curve"),
            float(tpw) if isinstance(tpw, int | float) else None,
            template if isinstance(template, int) else None,
        )


class CurveStore:
    """The saved curves on disk (see the module's doc). path: default `default_curves_path()`."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else default_curves_path()

    def _entries(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("format") != STORE_FORMAT:
            return {}
        entries = data.get("entries")
        return dict(entries) if isinstance(entries, dict) else {}

    def load(self, key: str) -> SavedCurve | None:
        """The saved curve for `key`, or None (absent or malformed)."""
        try:
            return SavedCurve.from_entry(self._entries().get(key))
        except CurveError:
            return None

    def store(self, key: str, saved: SavedCurve, log: str | None = None) -> bool:
        """Save (replace) `key`'s curve; True when written."""
        entries = self._entries()
        entries[key] = {
            **saved.to_entry(),
            "log": log,
            "saved_at": datetime.now().astimezone().isoformat(timespec="seconds"),
        }
        text = json.dumps({"format": STORE_FORMAT, "entries": entries}, indent=1, sort_keys=True)
        return write_atomically(self.path, text)


def curve_label(started_at: str | None, log: str) -> str:
    """ "your curve from 2026-11-30 (log …)" for a bench that started at `started_at`."""
    day = (started_at or "")[:10] or "an earlier bench"
    return f"your curve from {day} ({log})"
