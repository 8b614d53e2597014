"""The plots screen (Ctrl+G) and the sessions screen (Ctrl+O) on logs built for the test, and
the keys that open them from the app."""

from __future__ import annotations

import random

from textual.app import App
from textual.widgets import DataTable, Markdown, Static
from textual_plotext import PlotextPlot

from llmtop.tui.app import make_app
from llmtop.tui.screens.plots import PlotsScreen
from llmtop.tui.screens.report import ReportScreen
from llmtop.tui.screens.sessions import SessionsScreen
from llmtop.tui.state.settings import TuiSettings
from tests.unit.compare_logs import lognormal, write_log

from .fakes import FakeEngine, fake_connection, wait_for


class Host(App[None]):
    """An empty app that opens one screen."""

    def __init__(self, screen) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.first = screen

    def on_mount(self) -> None:
        self.push_screen(self.first)


def _text(widget: Static) -> str:
    return str(widget.render())


async def test_plots_show_the_series_and_histograms_of_a_log(tmp_path):
    path = write_log(tmp_path / "a.jsonl", [400.0 + i for i in range(12)], target=200)
    screen = PlotsScreen(str(path))
    async with Host(screen).run_test(size=(140, 44)) as pilot:
        await wait_for(pilot, lambda: screen.series != [], what="series")
        await pilot.pause()
        assert _text(screen.query_one("#plots-title", Static)).startswith("200 tok (1 of 1")
        ttft = screen.query_one("#plot-ttft", PlotextPlot)
        # the ok series: request ids 2..13 (id 1 is the warm-up), TTFT 400..411 ms
        (series,) = screen.series
        assert [(i, t) for i, t, _ in series.points["ok"]] == [
            (i + 2, 400.0 + i) for i in range(12)
        ]
        assert [i for i, _t, _d in series.points["warmup"]] == [1]
        drawn = str(ttft.render())
        # the ok series' points, joined by a braille line (new-user pass N3: a line in the
        # points' own glyph made 12 requests look like dozens): 12 "●", one per request
        assert drawn.count("●") == 12 + 1  # and the one in the title's legend
        assert any("\u2801" <= ch <= "\u28ff" for ch in drawn)  # braille dots
        # finding F: the warm-up's 900 ms is over 2 × 411 (plot_axes.OFF_SCALE), so the axis
        # is the ok requests' (400-411 padded by 8 %: 399.1-411.9) and the title names it; the
        # legend is in the title (plotext's box covered request 2)
        title = "TTFT ms · ● ok · off scale: #1 900"
        assert title in drawn
        ticks = drawn.replace(title, "")
        # the axis is 399.1-411.9 (the ok range padded by 8 %), labelled every 2 ms
        # (plot_axes.nice_ticks): 400, 402, … 410, evenly
        assert all(f"{v}┤" in ticks for v in range(400, 411, 2)) and "900" not in ticks
        decode = str(screen.query_one("#plot-decode", PlotextPlot).render())
        assert "decode tok/s · ● ok  o warm-up" in decode  # 20 tok/s: on scale
        assert "inter-token gaps" in str(screen.query_one("#plot-itl-hist", PlotextPlot).render())


async def test_a_log_that_cannot_be_read_says_why(tmp_path):
    bad = tmp_path / "old.jsonl"
    bad.write_text('{"type": "header", "format": 99}\n')
    screen = PlotsScreen(str(bad))
    async with Host(screen).run_test() as pilot:
        await pilot.pause()
        assert "session-log format 99" in _text(screen.query_one("#plots-title", Static))


async def test_sessions_list_report_and_compare(tmp_path):
    rng = random.Random(1)
    a = write_log(tmp_path / "a.jsonl", lognormal(rng, 400, 20))
    b = write_log(tmp_path / "b.jsonl", lognormal(rng, 480, 20))
    screen = SessionsScreen([str(tmp_path)])
    async with Host(screen).run_test(size=(160, 40)) as pilot:
        await wait_for(pilot, lambda: len(screen.entries) == 2, what="the list")
        table = screen.query_one("#sessions-table", DataTable)
        assert table.row_count == 2 and {e.path for e in screen.entries} == {str(a), str(b)}
        first = screen.entries[0].path
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ReportScreen), what="report")
        assert pilot.app.screen.log_path == first
        await pilot.press("escape")
        await pilot.press("c", "down", "c")  # baseline A = the first row, B = the second
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ReportScreen), what="compare")
        md = pilot.app.screen.query_one(Markdown).source
        assert md.startswith("# llmtop compare") and f"against {first}" in md
        second = screen.entries[1].path
        assert pilot.app.screen.command == f"llmtop compare {first} {second}"
        await pilot.press("escape")
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, PlotsScreen), what="plots")


async def test_ctrl_g_and_ctrl_o_open_the_screens_from_the_app(tmp_path):
    write_log(tmp_path / "old.jsonl", [400.0] * 5)
    settings = TuiSettings(engine="fake", log_path=str(tmp_path / "s.jsonl"), probes=False)
    app = make_app(settings, connection=fake_connection(FakeEngine()))
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        await pilot.press("ctrl+g")
        await wait_for(pilot, lambda: isinstance(app.screen, PlotsScreen), what="plots")
        assert app.screen.log_path == str(tmp_path / "s.jsonl")
        await pilot.press("escape")
        await pilot.press("ctrl+o")
        await wait_for(pilot, lambda: isinstance(app.screen, SessionsScreen), what="sessions")
        await wait_for(pilot, lambda: len(app.screen.entries) == 2, what="both logs")


def test_the_sessions_table_puts_the_verdict_before_the_long_columns():
    # new-user pass D13: at 80 columns the verdict, the last column, was off screen
    from llmtop.sessions.analysis.catalog import SessionEntry
    from llmtop.tui.screens.sessions import COLUMNS, cells

    entry = SessionEntry(path="p.jsonl", started="2026-12-03T10:02:03", engine="embedded",
                         model="gemma3:270m", kind="bench", verdict="CLEAN")
    shown = dict(zip(COLUMNS, cells(entry), strict=True))
    assert COLUMNS[:3] == ("date", "kind", "verdict")
    assert (shown["date"], shown["kind"], shown["verdict"], shown["engine"], shown["model"]) == (
        "2026-12-03 10:02:03", "bench", "CLEAN", "embedded", "gemma3:270m")
    assert shown["requests"] == entry.cells()[4]


async def test_a_refused_compare_shows_the_command_that_varies_the_option(tmp_path):
    # new-user pass N22: the TUI cannot pass --vary; its footer said `llmtop report B`
    a = write_log(tmp_path / "a.jsonl", [400.0] * 10, options={"num_predict": 30})
    b = write_log(tmp_path / "b.jsonl", [400.0] * 10, options={"num_predict": 50})
    screen = SessionsScreen([str(tmp_path)])
    async with Host(screen).run_test(size=(160, 40)) as pilot:
        await wait_for(pilot, lambda: len(screen.entries) == 2, what="the list")
        first, second = screen.entries[0].path, screen.entries[1].path
        await pilot.press("c", "down", "c")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ReportScreen), what="compare")
        assert pilot.app.screen.command == (
            f"llmtop compare {first} {second} --vary max_tokens")
    assert {first, second} == {str(a), str(b)}


async def test_at_80_columns_each_plot_keeps_its_name(tmp_path):
    # new-user pass N27: at 80x24 the TTFT plot lost its whole title (the first draw came
    # before the layout, at no width; an interactive session's log showed it)
    path = write_log(tmp_path / "a.jsonl", [400.0 + i for i in range(12)], target=200,
                     kind="session")
    screen = PlotsScreen(str(path))
    async with Host(screen).run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: screen.series != [], what="series")
        await pilot.pause()
        ttft = str(screen.query_one("#plot-ttft", PlotextPlot).render())
        decode = str(screen.query_one("#plot-decode", PlotextPlot).render())
        assert "TTFT ms" in ttft and "#1 900" in ttft  # the name and what is off its scale
        assert "decode tok/s" in decode


async def test_l_on_a_watch_log_opens_the_load_screen_ready_to_replay_it(tmp_path):
    from textual.widgets import Input, Select

    from llmtop.tui.screens.load import REPLAY, LoadScreen

    from .test_load_screen import three_request_watch_log

    write_log(tmp_path / "bench.jsonl", [400.0] * 5)
    three_request_watch_log(tmp_path / "watch.jsonl")
    settings = TuiSettings(engine="fake", log_path=str(tmp_path / "s.jsonl"), probes=False)
    app = make_app(settings, connection=fake_connection(FakeEngine()))
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        await pilot.press("ctrl+o")
        await wait_for(pilot, lambda: isinstance(app.screen, SessionsScreen), what="sessions")
        sessions = app.screen
        await wait_for(pilot, lambda: len(sessions.entries) == 3, what="the logs")
        kinds = [e.kind for e in sessions.entries]
        table = sessions.query_one("#sessions-table", DataTable)
        table.move_cursor(row=kinds.index("bench"))
        await pilot.press("l")  # not a watch log: said, nothing opens
        await pilot.pause()
        assert app.screen is sessions
        table.move_cursor(row=kinds.index("watch"))
        await pilot.press("l")
        await wait_for(pilot, lambda: isinstance(app.screen, LoadScreen), what="load screen")
        await pilot.pause()
        assert app.screen.query_one("#load-mode", Select).value == REPLAY
        assert app.screen.query_one("#load-levels", Input).value == str(tmp_path / "watch.jsonl")
