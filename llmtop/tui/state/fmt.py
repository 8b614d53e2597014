"""Small pure formatters for numbers on screen. None always renders as "n/a" (or "warming up"
for CPU readings that need a second sample), never as a made-up 0."""

from __future__ import annotations

import os
from pathlib import Path

from llmtop.sessions.reports.text import NA, size, spark_cell

__all__ = ["NA", "WARMING", "bar", "joules", "ms", "pct", "rate", "saved_where", "size",
           "spark_char"]

WARMING = "warming up"
_BLOCKS = " ▏▎▍▌▋▊▉█"


def ms(value: float | None, digits: int = 1) -> str:
    """Milliseconds, e.g. "123.4 ms"."""
    return NA if value is None else f"{value:.{digits}f} ms"


def rate(value: float | None, unit: str = "tok/s") -> str:
    """A rate, e.g. "112.3 tok/s"."""
    return NA if value is None else f"{value:.1f} {unit}"


def joules(value: float | None) -> str:
    """Joules with 3 significant digits, e.g. "0.267 J"."""
    return NA if value is None else f"{value:.3g} J"


def pct(value: float | None) -> str:
    """A CPU or memory percentage, e.g. "3.2 %"; None (no second reading yet) → "warming up"."""
    return WARMING if value is None else f"{value:.1f} %"


def bar(percent: float | None, width: int) -> str:
    """A horizontal bar `width` cells wide for 0–100 %, with eighth-cell resolution."""
    if percent is None:
        return "·" * width
    eighths = round(max(0.0, min(100.0, percent)) / 100.0 * width * 8)
    full, part = divmod(eighths, 8)
    out = "█" * full + (_BLOCKS[part] if part and full < width else "")
    return out.ljust(width)


def spark_char(percent: float | None) -> str:
    """One sparkline cell for 0–100 % (`textfmt.spark_cell`); "·" when unknown."""
    return spark_cell(percent, 0.0, 100.0, missing="·")


def saved_where(path: str | os.PathLike[str], home: str | None = None) -> str:
    """A saved file as a toast says it: its name on one line, "in <folder>" on the next, the
    home folder as "~" — a toast ~40 cells wide wrapped the whole path mid-name.
    home: the home folder (default: the user's)."""
    p = Path(path)
    folder = str(p.parent)
    root = home if home is not None else str(Path.home())
    if root and (folder == root or folder.startswith(root.rstrip(os.sep) + os.sep)):
        folder = "~" + folder[len(root.rstrip(os.sep)):]
    return f"{p.name}\nin {folder}"
