"""SparkBars draws the bars Textual's Sparkline drew (the reference: its own renderable,
rendered by Rich here), and renders them once per change of its values."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from rich.console import Console
from textual.renderables.sparkline import Sparkline as SparklineRenderable

from llmtop.tui.app import make_app
from llmtop.tui.state.settings import TuiSettings
from llmtop.tui.widgets.spark_bars import BARS, SparkBars, bar_levels

from .fakes import fake_connection, wait_for


def reference(values: list[float], width: int) -> str:
    """The characters Textual's Sparkline renderable draws for `values` at `width` cells."""
    console = Console(width=width, color_system=None, legacy_windows=False)
    with console.capture() as captured:
        console.print(SparklineRenderable(values, width=width), end="")
    return captured.get()


CASES = [
    ([], 5),
    ([3.0], 4),
    ([2.0, 2.0, 2.0], 6),  # all equal: the extent is taken as 1, every cell the lowest bar
    ([1.0, 8.0], 7),  # fewer values than cells: each stretched
    ([20.0, 21.5, 19.0, 40.0, 20.0, 20.5, 18.0], 7),
    ([float(i % 11) for i in range(300)], 80),  # more values than cells: each cell a run's max
    ([math.sin(i / 7) * 30 + 40 for i in range(97)], 33),
    ([5.0, 1.0, 9.0], 1),
]


@pytest.mark.parametrize(("values", "width"), CASES)
def test_bars_are_textual_sparklines_bars(values: list[float], width: int) -> None:
    ours = "".join(BARS[level] for level in bar_levels(values, width))
    assert ours == reference(values, width)


def test_levels_by_hand() -> None:
    # min 10, max 24, extent 14: (17 − 10) / 14 × 7 = 3.5 → 3; 24 → 7; 10 → 0
    assert bar_levels([10.0, 17.0, 24.0], 3) == [0, 3, 7]
    # 4 values in 2 cells: max(10, 24) → 7, max(17, 10) → 3
    assert bar_levels([10.0, 24.0, 17.0, 10.0], 2) == [7, 3]
    assert bar_levels([1.0], 0) == []


async def test_the_strip_is_rendered_once_per_change_of_values(tmp_path: Path) -> None:
    """Frames that repaint the bars without new values reuse the cached strip."""
    app = make_app(
        TuiSettings(log_path=str(tmp_path / "s.jsonl"), probes=False), connection=fake_connection()
    )
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        bars = app.query_one("#itl", SparkBars)
        rendered: list[int] = []
        render = bars._render_strip

        def counting(width: int, base: object) -> object:
            rendered.append(width)
            return render(width, base)  # type: ignore[arg-type]

        bars._render_strip = counting  # type: ignore[assignment,method-assign]
        bars.data = [10.0, 17.0, 24.0]
        first = bars.render_line(0)
        width = bars.size.width
        # the gaps' bars: one cell per value from the left (stretch=False), the rest blank
        assert width > 10 and first.text == reference([10.0, 17.0, 24.0], 3).ljust(width)
        assert bars.render_line(0) is first and rendered == [width]
        bars.data = [10.0, 17.0, 24.0]  # the same values: nothing to do
        assert bars.render_line(0) is first and rendered == [width]
        bars.data = [24.0, 10.0]
        assert bars.render_line(0).text == "█▁".ljust(width)
        assert rendered == [width, width]
        await pilot.pause()


async def test_the_gap_bars_carry_their_scale(tmp_path: Path) -> None:
    """The note follows the bars after a space; with more values than the cells the note
    leaves, each cell is its run's maximum (`bar_levels` at the cells left)."""
    app = make_app(
        TuiSettings(log_path=str(tmp_path / "s.jsonl"), probes=False), connection=fake_connection()
    )
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        bars = app.query_one("#itl", SparkBars)
        width = bars.size.width
        bars.data = [10.0, 17.0, 24.0]
        bars.note = "max 24.0 · p50 17.0 ms"
        assert bars.render_line(0).text == "▁▄█ max 24.0 · p50 17.0 ms".ljust(width)
        many = [float(i % 11) for i in range(300)]
        bars.data = many
        cells = width - len(bars.note) - 1
        expected = "".join(BARS[level] for level in bar_levels(many, cells))
        assert bars.render_line(0).text == f"{expected} {bars.note}"
