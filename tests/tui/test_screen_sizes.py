"""The screen at every size, and no stray bar glyphs (issue 32, rows 4 and 5; newcomer.md).

The "ghost glyphs" (`▆▆` in the help box, `▃▃` in the history, `▅▅` in the response pane
after a resize) were scrollbar thumb ends: Textual ends a thumb with an eighth-block glyph
repeated over the bar's 2 columns, and llmtop's charts are drawn with the same glyphs. These
tests read every cell of the composed screen (what the terminal is sent) and assert that a
block glyph appears only inside a chart: the sparklines (`SparkBars`) and the probe panel's CPU
bars. A screen that scrolls still shows its scrollbar (one cell wide, whole cells).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.segment import Segment
from textual.app import App
from textual.geometry import Region
from textual.widget import Widget
from textual.widgets import Footer, Input

from llmtop.tui.app import LlmtopApp
from llmtop.tui.screens.help import HelpScreen
from llmtop.tui.screens.report import ReportScreen
from llmtop.tui.widgets.machine_badge import MachineBadge
from llmtop.tui.widgets.probe_panel import ProbePanel
from llmtop.tui.widgets.request_history import RequestHistory
from llmtop.tui.widgets.spark_bars import SparkBars
from llmtop.tui.widgets.token_pane import TokenPane

from .fakes import OK_STATS, SENT_NS, FakeEngine, ev, fake_connection, wait_for
from .test_fake_engine import build, drawn, send

BLOCKS = set("▁▂▃▄▅▆▇█▉▊▋▌▍▎▏")  # the sparkline and bar glyphs (and Textual's thumb ends)
# 60 lines of answer: more than a 24-line terminal's response pane holds, so it scrolls
LONG = [ev(10.0 + i, f"line {i} of a long answer\n") for i in range(60)]
LONG_SCRIPT = [*LONG, ev(100.0, done=True, stats=OK_STATS)]


def screen_cells(app: App[Any]) -> dict[tuple[int, int], str]:
    """Every cell of the screen as composed for the terminal (the top screen over the ones
    under it), by (x, y)."""
    update = app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    cells: dict[tuple[int, int], str] = {}
    for y, strip in enumerate(update.strips):  # type: ignore[union-attr]
        x = 0
        for segment in strip:
            for char in segment.text:
                cells[(x, y)] = char
                x += Segment(char).cell_length
    return cells


def stray_blocks(app: App[Any], inside: Region, charts: list[Widget]) -> list[tuple[int, int]]:
    """The cells of `inside` that hold a block glyph outside every widget of `charts`."""
    allowed = [w.region for w in charts if w.display]
    return sorted(
        (x, y)
        for (x, y), char in screen_cells(app).items()
        if char in BLOCKS and inside.contains(x, y) and not any(r.contains(x, y) for r in allowed)
    )


def charts(app: App[Any]) -> list[Widget]:
    """The widgets whose cells may hold bars: sparklines, the probe panel's CPU bars, the
    prompt box (Textual's "tall" border is drawn with ▊, ▎ and ▁) and the footer (its "▏"
    before the palette key)."""
    return [
        *app.screen.query(SparkBars),
        *app.screen.query(ProbePanel),
        *app.screen.query(Input),
        *app.screen.query(Footer),
    ]


def long_app(tmp_path: Path) -> LlmtopApp:
    app, _ = build(tmp_path, fake_connection(FakeEngine(extra={"long": LONG_SCRIPT})))
    return app


async def test_a_resized_screen_has_no_stray_bars(tmp_path: Path) -> None:
    """120×40 with a 60-line answer, then 80×24: the response pane scrolls (its scrollbar
    shows) and no block glyph is outside a chart, before or after the resize."""
    app = long_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await send(pilot, app, "long")
        await wait_for(pilot, lambda: drawn(app), what="the long answer drawn")
        whole = app.screen.region
        assert stray_blocks(app, whole, charts(app)) == []
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        pane = app.query_one(TokenPane)
        assert pane.show_vertical_scrollbar  # 60 lines in a pane of ~8: it scrolls
        assert stray_blocks(app, whole.intersection(app.screen.region), charts(app)) == []


async def test_help_box_scrolls_without_stray_bars(tmp_path: Path) -> None:
    """F1 at 120×40: the help is taller than the box, so the box scrolls; none of its cells
    holds a block glyph (the thumb was "▆▆")."""
    app, _ = build(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await send(pilot, app, "hello")
        await wait_for(pilot, lambda: drawn(app), what="request drawn")
        await pilot.press("f1")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        await pilot.pause()
        box = app.screen.query_one("#help-box")
        assert box.show_vertical_scrollbar
        assert stray_blocks(app, box.region, []) == []


async def test_history_table_scrolls_without_stray_bars(tmp_path: Path) -> None:
    """Ten requests, F2 at 120×40: the table holds fewer rows than ten, so it scrolls; the
    history's box holds no block glyph (the thumb was "▃▃" at the end of a row)."""
    app, _ = build(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        for n in range(1, 11):
            await send(pilot, app, "hello")
            await wait_for(pilot, lambda n=n: drawn(app, n), what=f"request {n} drawn")
        await pilot.press("f2")
        history = app.query_one(RequestHistory)
        await wait_for(pilot, lambda: len(history.rows) == 10, what="ten rows")
        await pilot.pause()
        assert history.table.show_vertical_scrollbar
        assert stray_blocks(app, history.region, []) == []


async def test_report_box_scrolls_without_stray_bars(tmp_path: Path) -> None:
    """A report longer than the box (80 lines in a 40-line terminal): it scrolls, and the box
    holds no block glyph (the thumb was "▁▁")."""
    app, _ = build(tmp_path)
    report = "\n\n".join(f"paragraph {i} of the report" for i in range(80))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        await app.push_screen(ReportScreen(report, "r.jsonl"))
        await pilot.pause()
        box = app.screen.query_one("#report-box")
        assert box.show_vertical_scrollbar
        assert stray_blocks(app, box.region, []) == []


async def test_narrow_screen_gives_the_width_to_the_response(tmp_path: Path) -> None:
    """80×24: the probe panel gives way to the one-line badge, and the response pane gets the
    whole width (80 − 2 border = 78 columns, less its 1-column scrollbar and 1+1 padding: 75
    columns of text); from 100 columns the panel is back, 46 wide; at 240 it is a quarter."""
    app, _ = build(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await send(pilot, app, "hello")
        await wait_for(pilot, lambda: drawn(app), what="request drawn")
        panel, badge = app.query_one(ProbePanel), app.query_one(MachineBadge)
        assert not panel.display and badge.display
        assert app.query_one(TokenPane).scrollable_content_region.width == 75
        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        assert panel.display and not badge.display and panel.outer_size.width == 46
        await pilot.resize_terminal(240, 70)
        await pilot.pause()
        assert panel.outer_size.width == 240 // 4


def screen_lines(app: App[Any]) -> list[str]:
    """The screen as lines of text (cells in order, trailing blanks kept)."""
    cells = screen_cells(app)
    width, height = app.screen.size
    return ["".join(cells.get((x, y), " ") for x in range(width)) for y in range(height)]


PROMPT = "hello there, what is the capital of France and why"  # 50 characters


async def open_history(pilot: Any, app: LlmtopApp, requests: int) -> RequestHistory:
    for n in range(1, requests + 1):
        await send(pilot, app, PROMPT)
        await wait_for(pilot, lambda n=n: drawn(app, n), what=f"request {n} drawn")
    await pilot.press("f2")
    history = app.query_one(RequestHistory)
    await wait_for(pilot, lambda: len(history.rows) == requests, what="the rows")
    await pilot.pause()
    return history


async def test_the_history_keeps_every_figure_and_gives_the_prompt_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding D: at 120×40 the history cut its "tokens" and status columns and the prompt
    stayed 17 characters at 240. The prompt is now the last column: at any width the headers
    and the status are whole, and at 240 the 50-character prompt is whole too."""
    monkeypatch.setattr("llmtop.sessions.measure.request.perf_counter_ns", lambda: SENT_NS)
    app, _ = build(tmp_path)
    async with app.run_test(size=(240, 50)) as pilot:
        history = await open_history(pilot, app, 2)
        box = history.region
        lines = [line[box.x : box.right] for line in screen_lines(app)[box.y : box.bottom]]
        header = lines[1]
        for label in ("TTFT ms", "TPOT ms", "decode cl/srv", "tokens", "status", "noisy",
                      "prompt"):
            assert f" {label} " in header, label
        assert PROMPT in lines[2] and " ok " in lines[2]
        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        box = history.region
        lines = [line[box.x : box.right] for line in screen_lines(app)[box.y : box.bottom]]
        assert " status " in lines[1] and " ok " in lines[2]
        # the room left is the box's inner width less the figures' columns: the table does
        # not scroll sideways, and the prompt cell is cut to it with "…"
        table = history.table
        assert table.virtual_size.width <= table.scrollable_content_region.width
        room = history.prompt_chars
        assert room < len(PROMPT) and PROMPT[: room - 1] + "…" in lines[2]
        # new-user pass N6: back to the wide screen, the prompt stayed cut at the narrow
        # width ("Explai" beside 38 empty columns): it is whole again
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        await pilot.resize_terminal(240, 50)
        await pilot.pause()
        await pilot.pause()
        box = history.region
        lines = [line[box.x : box.right] for line in screen_lines(app)[box.y : box.bottom]]
        assert history.prompt_chars >= len(PROMPT) and PROMPT in lines[2], lines[2]


async def test_a_short_screen_keeps_lines_for_the_response_with_the_history_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding E: at 80×24 with F2 open the response pane had no line left. The history takes
    at most 30 % of the screen (of the 23 rows above the docked footer: 6.9, so 6) and the
    TTFT-per-request strip's place (app.SHORT_BELOW): the response keeps 4 lines (24 − header,
    prompt box 3, footer, history 6: 13 rows; metrics 7, the pane's 2 of border)."""
    monkeypatch.setattr("llmtop.sessions.measure.request.perf_counter_ns", lambda: SENT_NS)
    app, _ = build(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        history = await open_history(pilot, app, 3)
        assert history.outer_size.height == 6
        assert app.query_one(TokenPane).scrollable_content_region.height == 4
        # the figures' columns take 69 of the box's 78 (each its widest cell + 2), the
        # prompt's padding 2 and the scrollbar 1: the prompt keeps 6 characters, no sideways
        # scrolling
        assert history.prompt_chars == 6
        assert history.table.virtual_size.width <= history.table.scrollable_content_region.width
        footer = screen_lines(app)[-1]
        # finding G: the last column showed the "2" of "f2" from under the palette key
        assert footer.rstrip().endswith("^p palette") and footer[-1] == " "
        assert "f2 History" in footer and "f3 Apps" in footer and "^l Load" in footer


async def test_the_bench_form_fits_80_columns(tmp_path: Path) -> None:
    """New-user pass D12: at 80×24 the bench form's "max tokens" box was cut ("▊ 1" for 100);
    it is on the second row now, and every box and the Start button are wholly on screen."""
    from llmtop.tui.screens.bench import BenchScreen

    app, _ = build(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        await pilot.press("ctrl+b")
        await wait_for(pilot, lambda: isinstance(app.screen, BenchScreen), what="bench")
        await pilot.pause()
        for widget in (*app.screen.query(Input), app.screen.query_one("#bench-start")):
            assert widget.region.width > 0 and widget.region.right <= 80, widget.id
        assert "100" in "".join(screen_lines(app)[4:7])  # max tokens' default, shown whole
