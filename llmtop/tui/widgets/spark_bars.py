"""A one-line bar chart of numbers, drawn with the eight block characters ▁▂▃▄▅▆▇█.

Textual's own Sparkline renders its bars again on every frame that touches it, working out
each cell's colour with exact fractions and a colour blend (on a 2-core machine 7 % of the
main thread's time while a request streamed at 50 tok/s, bench/tui_cost.py --py-spy). This
widget does the work once per change of its values: `data` is set, the bars become one cached
`Strip`, and a frame only hands that strip to the compositor (Line API, `render_line`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget

BARS = "▁▂▃▄▅▆▇█"
TOP = len(BARS) - 1  # the tallest bar's index


def bar_levels(values: Sequence[float], width: int) -> list[int]:
    """Each of `width` cells as a bar index 0–7, as Textual's Sparkline draws `values`.

    More values than cells: the values are cut into `width` runs of n·k//width … n·(k+1)//width
    and each cell shows its run's maximum; fewer: cell c shows value n·c//width (each value
    stretched over ~width/n cells). A value's index is int((v − min) / (max − min) × 7), so the
    minimum is ▁ and the maximum █; all values equal: every cell ▁ (Sparkline's extent of 1).
    One value: every cell █; none: every cell ▁. Raises nothing for width ≤ 0 (no cells).
    """
    n = len(values)
    if width <= 0:
        return []
    if n <= 1:
        return [TOP if n else 0] * width
    if n >= width:
        cells = [max(values[n * k // width : n * (k + 1) // width]) for k in range(width)]
    else:
        cells = [values[n * c // width] for c in range(width)]
    low = min(values)
    extent = max(values) - low or 1.0
    return [int((v - low) / extent * TOP) for v in cells]


class SparkBars(Widget):
    """One line of bars (`bar_levels`) over the widget's width; the colour runs from the
    `spark-bars--min` component's colour (▁) to `spark-bars--max` (█) in eight steps.

    data: the values (floats, finite); setting different values re-renders the strip once
    and repaints the widget in place (no layout); the same values do nothing.
    stretch: True spreads the values over the whole width (each of n < width values over
    ~width/n cells); False draws one cell per value from the left (more values than cells:
    each cell the maximum of its run, as `bar_levels`), then `note` (dim) after the bars.
    note: a scale for the bars, e.g. "max 4620.0 · p50 33.1 ms" (with stretch=False only).
    """

    COMPONENT_CLASSES: ClassVar[set[str]] = {"spark-bars--min", "spark-bars--max"}
    DEFAULT_CSS = """
    SparkBars {
        height: 1;
    }
    SparkBars > .spark-bars--max {
        color: $primary;
    }
    SparkBars > .spark-bars--min {
        color: $primary 30%;
    }
    """

    def __init__(self, data: Sequence[float] = (), stretch: bool = True, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.stretch = stretch
        self._note = ""
        self._data: tuple[float, ...] = tuple(data)
        self._strip: Strip | None = None
        self._key: object = None  # (width, base style) the strip was rendered at

    @property
    def data(self) -> tuple[float, ...]:
        """The values drawn, oldest first."""
        return self._data

    @data.setter
    def data(self, values: Sequence[float]) -> None:
        values = tuple(values)
        if values == self._data:
            return
        self._data = values
        self._strip = None
        self.refresh()

    @property
    def note(self) -> str:
        """The text after the bars (stretch=False), "" for none."""
        return self._note

    @note.setter
    def note(self, text: str) -> None:
        if text != self._note:
            self._note = text
            self._strip = None
            self.refresh()

    def _levels(self, width: int) -> list[int]:
        """The bar index of each cell drawn: every cell when stretching, else one per value
        in the cells the note leaves (a space and the note after them)."""
        if self.stretch:
            return bar_levels(self._data, width)
        cells = max(0, width - (len(self._note) + 1 if self._note else 0))
        return bar_levels(self._data, min(len(self._data), cells))

    def _styles(self, base: Style) -> list[Style]:
        """The eight bar styles: min colour to max colour, blended over the background."""
        _, background = self.background_colors
        low = background + self.get_component_styles("spark-bars--min").color
        high = background + self.get_component_styles("spark-bars--max").color
        return [base + Style(color=low.blend(high, i / TOP).rich_color) for i in range(TOP + 1)]

    def _render_strip(self, width: int, base: Style) -> Strip:
        styles = self._styles(base)
        segments: list[Segment] = []
        run_level, run = -1, 0
        levels = self._levels(width)
        for level in [*levels, -1]:  # -1: flush the last run
            if level != run_level and run:
                segments.append(Segment(BARS[run_level] * run, styles[run_level]))
                run = 0
            run_level, run = level, run + 1
        if not self.stretch and self._note:
            note = f" {self._note}" if levels else self._note
            segments.append(Segment(note, base + Style(dim=True)))
        return Strip(segments).crop_extend(0, width, base)

    def render_line(self, y: int) -> Strip:
        """The bars on line 0 (cached until the values, width or style change); blank below."""
        width, base = self.size.width, self.rich_style
        if y > 0:
            return Strip.blank(width, base)
        if self._strip is None or self._key != (width, base):
            self._key = (width, base)
            self._strip = self._render_strip(width, base)
        return self._strip


__all__ = ["BARS", "SparkBars", "bar_levels"]
