"""Plain-text formatting shared by the reports and the TUI (pure; no Rich, no Textual).

One rule each, so a number reads the same in a report and on screen: a missing value is
"n/a", never a made-up 0; bytes are binary units; a sparkline cell is one of eight blocks;
every markdown table goes through `md_table`, which escapes its cells.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

NA = "n/a"
SPARK_BLOCKS = "▁▂▃▄▅▆▇█"
SPARK_FLAT = "▄"  # every value equal: mid-height, so a flat series does not read as "low"


def num(value: float | None, digits: int = 1) -> str:
    """A number with thousands separators, e.g. "2,100.0"; None → "n/a"."""
    return NA if value is None else f"{value:,.{digits}f}"


def size(n_bytes: float | None) -> str:
    """Bytes in binary units: "512 B", "1.5 KiB", "3.0 GiB" (whole bytes, else one decimal;
    TiB is the largest unit). None → "n/a"."""
    if n_bytes is None:
        return NA
    value = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def spark_cell(value: float | None, lo: float, hi: float, missing: str = " ") -> str:
    """One sparkline cell for `value` on the scale lo…hi (clipped to it): the nearest of the
    eight blocks, `SPARK_FLAT` when lo == hi, `missing` when the value is None or not finite."""
    if value is None or not math.isfinite(value):
        return missing
    if hi == lo:
        return SPARK_FLAT
    level = round((min(hi, max(lo, value)) - lo) / (hi - lo) * (len(SPARK_BLOCKS) - 1))
    return SPARK_BLOCKS[level]


def sparkline(values: Sequence[float | None]) -> str:
    """An ordered series as text, scaled between its own min and max (missing values as a
    space); "" when no value is present."""
    present = [v for v in values if v is not None and math.isfinite(v)]
    if not present:
        return ""
    lo, hi = min(present), max(present)
    return "".join(spark_cell(v, lo, hi) for v in values)


def md_cell(value: object) -> str:
    """One markdown table cell: str(value) (None → "n/a") with "|" escaped and line breaks as
    spaces, so a failure reason (child.py joins log lines with " | ") cannot split the row."""
    text = "n/a" if value is None else str(value)
    return text.replace("|", "\\|").replace("\r\n", " ").replace("\n", " ")


def md_table(headers: Sequence[object], rows: Sequence[Sequence[object]]) -> list[str]:
    """A markdown table as lines: the header row, the separator, one line per row; every
    cell through `md_cell`. Raises ValueError when a row's width differs from the headers'."""
    lines = ["| " + " | ".join(md_cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"a row of {len(row)} cells under {len(headers)} headers: {row!r}")
        lines.append("| " + " | ".join(md_cell(c) for c in row) + " |")
    return lines
