"""Axes for the plots screen (Ctrl+G) that a person can read, where plotext's own drew
"one of its two points sits on the frame corner; fractional request numbers (1.25, 3.2, 5.5);
a histogram axis from −49.4 ms; y ticks 0.17/0.33 for counts").

Pure numbers, no plotext: the screen hands these limits and ticks to the plots.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

PAD = 0.08  # each side of a series' range, as a fraction of the range: no point on the frame
MOST_TICKS = 8  # at most this many integer ticks on an axis


def padded_range(values: Sequence[float], floor: float | None = None) -> tuple[float, float]:
    """(lo, hi) around `values` with PAD of their span on each side (a single value or equal
    values: ±PAD of the value, or ±1 for 0); `floor` (e.g. 0 for times) bounds lo from below
    when every value is at or above it. Raises ValueError for no values."""
    if not values:
        raise ValueError("padded_range needs at least one value")
    lo, hi = min(values), max(values)
    pad = (hi - lo) * PAD or abs(hi) * PAD or 1.0
    lo, hi = lo - pad, hi + pad
    if floor is not None and min(values) >= floor:  # a floor under every value, never above
        lo = max(lo, floor)
    return lo, hi


OFF_SCALE = 2.0  # a warm-up or excluded point over 2x the ok points' max (or under half their
# min) would squash them to a line (a 1.6 s cold start over 20 ms requests): named, not drawn


def off_scale(value: float, ok: Sequence[float]) -> bool:
    """True when `value` (a warm-up's or an excluded request's) lies beyond OFF_SCALE times the
    ok values' max or under their min / OFF_SCALE: the axis is scaled to the ok requests and
    the plot's title names the point instead. False when there are no ok values."""
    if not ok:
        return False
    return value > max(ok) * OFF_SCALE or value < min(ok) / OFF_SCALE


def integer_ticks(lo: float, hi: float, most: int = MOST_TICKS) -> list[int]:
    """Whole numbers in [lo, hi], at a step of 1, 2, 5, 10, 20, 50 … chosen so that at most
    `most` of them are drawn (request numbers, counts). [] when the range holds none."""
    first, last = math.ceil(lo), math.floor(hi)
    if last < first:
        return []
    step = next(s for s in _steps() if (last - first) // s + 1 <= most)
    start = math.ceil(first / step) * step
    return list(range(start, last + 1, step))


def nice_ticks(lo: float, hi: float, most: int = 6) -> list[float]:
    """Evenly spaced values in [lo, hi] at a step of 1, 2 or 5 × 10^k, at most `most` of them
    and at least 2 where the range allows: the y axis's labels, which plotext spaced unevenly
    on a short plot (171.9, 152.7, 114.3, 95.1, 56.7 at 80×24). [] for an
    empty range."""
    if not hi > lo:
        return []
    span = hi - lo
    exponent = math.floor(math.log10(span / max(most - 1, 1)))
    for power in (exponent, exponent + 1, exponent + 2):
        for m in (1, 2, 5):
            step = m * 10.0**power
            first = math.ceil(lo / step) * step
            count = math.floor((hi - first) / step + 1e-9) + 1
            if count <= most:
                return [round(first + i * step, 10) for i in range(count)]
    return [lo, hi]


def tick_label(value: float) -> str:
    """A tick's text: whole numbers without decimals ("150"), else as few as the step needs
    ("0.5", "2.25")."""
    return f"{value:.0f}" if value == round(value) else f"{value:g}"


def _steps() -> list[int]:
    """1, 2, 5, 10, 20, 50, … up to 10^9."""
    return [m * 10**e for e in range(10) for m in (1, 2, 5)]


def histogram(
    values: Sequence[float], bins: int, low: float | None = 0.0
) -> tuple[list[float], list[int], float]:
    """Equal-width bins from `low` (0: the gaps' axis starts at 0 ms; None: the smallest value,
    for TTFT, whose spread sits far from 0) to max(values): (the bins' left edges, their counts,
    the bin width). Raises ValueError for no values."""
    if not values:
        raise ValueError("histogram needs at least one value")
    bottom = min(values) if low is None else low
    top = max(values)
    if top <= bottom:  # one value (or all equal): one bin of a width around it
        bottom, top = padded_range([top], floor=0.0 if low == 0.0 else None)
    counts, edges = np.histogram(np.asarray(values, dtype=float), bins=bins, range=(bottom, top))
    return [float(e) for e in edges[:-1]], [int(c) for c in counts], float(edges[1] - edges[0])


__all__ = ["MOST_TICKS", "OFF_SCALE", "PAD", "histogram", "integer_ticks", "nice_ticks",
           "off_scale", "padded_range", "tick_label"]
