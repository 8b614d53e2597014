"""The load screen (Ctrl+L) on a real connection to the slotted server: a two-level sweep
runs from the form, the table and the curve fill in, the knee is stated."""

from __future__ import annotations

import pytest
from rich.console import Console
from rich.text import Text
from textual.app import App
from textual.widgets import Input, Static

from llmtop.connect import connect
from llmtop.sessions.analysis.load import LevelResult, Percentiles
from llmtop.sessions.records.log import read_log
from llmtop.testing.slotted import Service, SlottedUpstream
from llmtop.tui.screens.load import LoadScreen, config_from_form
from llmtop.tui.state.load_view import curve, level_cells, levels_table
from llmtop.tui.state.settings import TuiSettings


class Host(App[None]):
    def __init__(self, screen: LoadScreen) -> None:
        super().__init__()
        self.load_screen = screen

    async def on_mount(self) -> None:
        await self.push_screen(self.load_screen)


async def test_a_sweep_from_the_form(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))  # the sweep's log goes there
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with SlottedUpstream(Service(slots=2, prefill_s=0.005, tokens=4, gap_s=0.002)) as up:
        conn = await connect("ollama", up.url, "slotted")
        screen = LoadScreen(conn, TuiSettings())
        try:
            async with Host(screen).run_test(size=(140, 50)) as pilot:
                screen.query_one("#load-levels", Input).value = "1,2"
                screen.query_one("#load-requests", Input).value = "4"
                screen.query_one("#load-prompt", Input).value = "20"
                screen.query_one("#load-max-tokens", Input).value = "3"
                screen.query_one("#load-slo", Input).value = "ttft=5s"
                await pilot.click("#load-start")
                await screen.worker.wait()
                await pilot.pause(0.3)
                knee = str(screen.query_one("#load-knee", Static).render())
                # the verdict's word, then the knee (not trusted when a level ran NOISY:
                # this shared machine's probes decide which)
                first, second = knee.splitlines()[:2]
                assert first.startswith("Verdict: ")
                head = "Knee (not trusted: " if "CONTAMINATED" in first else "Knee: "
                assert second.startswith(head)
                assert second.endswith("this engine serves 2 concurrent users within TTFT ≤ "
                                       "5000 ms.")
                log = read_log(knee.splitlines()[2].removeprefix("log "))
                assert log.header.load.max_tokens == 3  # the form's field reached the sweep
                assert [lv.value for lv in screen.live.levels] == [1, 2]
                console = Console(width=140, record=True)
                console.print(levels_table(screen.live.levels))  # what #load-table shows
                table = console.export_text()
                assert "1 user " in table and "2 users" in table and "4/0" in table
        finally:
            await conn.close()


def test_form_errors_are_messages():
    with pytest.raises(ValueError, match="whole number"):
        config_from_form(TuiSettings(), "concurrency", "1,2", "0", "", "200")
    with pytest.raises(ValueError, match="SLO term"):
        config_from_form(TuiSettings(), "concurrency", "1,2", "5", "p99=1", "200")
    with pytest.raises(ValueError, match="max tokens must be a whole number >= 2"):
        config_from_form(TuiSettings(), "concurrency", "1,2", "5", "", "200", "1")
    cfg = config_from_form(TuiSettings(options={"seed": 7}), "rate", "0.5,1", "5", "", "64")
    assert (cfg.mode, cfg.levels, cfg.seed, cfg.prompt_tokens) == ("rate", (0.5, 1.0), 7, 64)
    assert cfg.max_tokens == 100  # the form's default, `llmtop load`'s (Workload.max_tokens)
    cfg = config_from_form(TuiSettings(), "concurrency", "1", "5", "", "64", " 32 ")
    assert cfg.max_tokens == 32 and cfg.options()["num_predict"] == 32


def level(n: int, value: float, rate: float, ttft: float) -> LevelResult:
    p = Percentiles(1, ttft, None, None, None)
    empty = Percentiles(0, None, None, None, None)
    return LevelResult(
        n,
        "concurrency",
        value,
        1,
        1,
        {"ok": 1},
        1.0,
        p,
        empty,
        empty,
        empty,
        None,
        None,
        None,
        empty,
        rate,
        None,
        None,
        None,
        "QUIET",
        None,
        None,
        None,
    )


def test_curve_puts_each_level_at_its_throughput_and_latency():
    text = curve([level(0, 1, 5.0, 100.0), level(1, 2, 10.0, 200.0)], width=11, height=3)
    rows = text.plain.splitlines()
    # level 2 at (max x, max y): top row, last column; level 1 at (x/2, y/2): middle row, col 5
    assert rows[0].endswith("2") and rows[0].startswith("    200 ┤")
    assert rows[1].index("1") == len("        │") + 5
    assert isinstance(curve([]), Text) and "appears as levels finish" in curve([]).plain


def test_a_negative_figure_is_not_drawn_and_the_others_keep_their_numbers():
    # a TTFT p50 of −142,581 ms (a send stamp and chunk stamps from two clocks, seen in a
    # test) had its row computed below the grid: IndexError in the screen's redraw
    text = curve([level(0, 1, 5.0, -142_581.0), level(1, 2, 10.0, 200.0)], width=11, height=3)
    rows = text.plain.splitlines()
    assert rows[0].startswith("    200 ┤") and rows[0].endswith("2")  # level 2, numbered 2
    assert "1" not in "".join(r[len("        │"):] for r in rows[:3])


@pytest.mark.parametrize("width", [80, 200])
async def test_the_form_is_labelled_fits_and_shows_the_machine(tmp_path, width):
    """Ctrl+L at 80 and 200 columns (issue 32, row 10): a label before each field, in the bench
    form's words; the Start button wholly on screen; the app's NOISY sample in the badge."""
    from llmtop.probes.verdict import Verdict
    from llmtop.tui.messages import ProbeSampled
    from llmtop.tui.widgets.machine_badge import MachineBadge

    from .fakes import browser_busy, busy_apps, machine_sample, wait_for
    from .test_fake_engine import build

    app, _ = build(tmp_path)
    async with app.run_test(size=(width, 30)) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        noisy = machine_sample(1, 40.0, busy_apps(), Verdict.of([browser_busy()]), 3.2)
        app.post_message(ProbeSampled(noisy))
        await wait_for(pilot, lambda: app.latest_probe is noisy, what="the sample")
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: isinstance(app.screen, LoadScreen), what="load screen")
        await pilot.pause(0.3)
        screen = app.screen
        labels = {}
        for field in screen.query(Input):
            siblings = list(field.parent.children)
            before = siblings[siblings.index(field) - 1]
            labels[field.id] = str(before.render())
        assert labels == {
            "load-levels": "levels",
            "load-requests": "requests",
            "load-prompt": "prompt tokens",
            "load-max-tokens": "max tokens",
            "load-slo": "SLO",
        }
        start = screen.query_one("#load-start").region
        assert start.width >= 9 and start.right <= width
        # finding I: every box wholly on screen, the levels and the SLO with room to type in;
        # a box's room is its content region (its width less border and padding, both sides):
        # new-user pass N1 saw "200" drawn "20" in a box whose room was 2 cells, and the old
        # check here counted one side of the padding only
        for field in screen.query(Input):
            assert field.region.right <= width, field.id

        def room(wid: str) -> int:
            return screen.query_one(wid, Input).content_region.width

        assert room("#load-levels") >= len("1,2,4,8,16,32")
        assert room("#load-slo") >= len("ttft=500ms,tpot=50ms")
        assert room("#load-prompt") >= len("4096") + 1  # and the cursor after it
        assert room("#load-max-tokens") >= len("1024")
        for wid, value in (("#load-prompt", "200"), ("#load-max-tokens", "100")):
            box = screen.query_one(wid, Input)
            assert box.value == value
            line = "".join(seg.text for seg in box.render_line(0))
            assert value in line, (wid, line)
        badge = str(screen.query_one(MachineBadge).content)
        assert badge.startswith(" NOISY  Chromium (14 processes) is using 38 % CPU")


def test_a_finished_level_is_one_line_at_80_columns():
    """Finding I: the report's cells ("19,439.5 / 21,000.2 / 22,000.1") wrapped over three
    lines in the load screen's table. Its own cells are short and never wrap."""
    import dataclasses

    lv = dataclasses.replace(
        level(0, 4, 0.112, 800.0),
        ttft=Percentiles(20, 812.3, 1430.2, 1610.7, 1700.0),
        tpot=Percentiles(20, 48.24, 60.1, 62.0, 70.0),
        e2e=Percentiles(20, 19439.5, 21000.2, 22000.1, 23000.0),
        tok_per_s=9.34, goodput_per_s=0.1, goodput_share=0.9,
    )
    # TTFT p50/p95 whole ms; TPOT 48.24 → 48.2 ms; E2E 19439.5 ms → 19.4 s; 0.112 req/s
    assert level_cells(lv) == ("4 users", "1/0", "812/1611", "48.2", "19.4", "0.11", "9.3",
                               "0.10 (90%)", "QUIET")
    console = Console(width=78, record=True)
    console.print(levels_table([lv, lv]))
    lines = console.export_text().splitlines()
    assert len(lines) == 4  # two header lines, one line per level
    assert lines[2].split() == ["4", "users", "1/0", "812/1611", "48.2", "19.4", "0.11", "9.3",
                                "0.10", "(90%)", "QUIET"]


def three_request_watch_log(path) -> list[int]:
    """A watch log of 3 ok /api/chat requests 30 and 50 ms apart, with their text; their ids."""
    from datetime import UTC, datetime, timedelta

    from llmtop.sessions.records.log import SessionLog
    from llmtop.sessions.records.request import RequestRecord

    log = SessionLog(path, {"kind": "watch", "via": "watch",
                            "watch": {"pairs": [], "bodies_logged": True}})
    start = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    for k, offset_ms in enumerate((0, 30, 80)):
        prompt = "say " + "more " * (k + 3)
        log.write(RequestRecord.from_json({
            "id": k + 1, "status": "ok", "prompt": prompt, "endpoint": "/api/chat",
            "started_at": (start + timedelta(milliseconds=offset_ms)).isoformat(),
            "stats": {"prompt_eval_count": len(prompt.split()) + 10, "eval_count": 3},
            "metrics": {"ttft_ms": 20.0, "e2e_ms": 30.0}}))
    log.close()
    return [1, 2, 3]


async def test_a_replay_from_the_form(tmp_path, monkeypatch):
    from textual.widgets import Label, Select

    from llmtop.tui.screens.load import REPLAY

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    ids = three_request_watch_log(tmp_path / "watch.jsonl")
    with SlottedUpstream(Service(slots=2, prefill_s=0.002, tokens=3, gap_s=0.002)) as up:
        conn = await connect("ollama", up.url, "slotted")
        screen = LoadScreen(conn, TuiSettings())
        try:
            async with Host(screen).run_test(size=(140, 50)) as pilot:
                screen.query_one("#load-mode", Select).value = REPLAY
                await pilot.pause()
                label = screen.query_one("#load-levels-label", Label)
                assert str(label.render()) == "watch log"  # the box now takes the path
                levels = screen.query_one("#load-levels", Input)
                levels.value = str(tmp_path / "nowhere.jsonl")
                await pilot.click("#load-start")
                await pilot.pause()
                assert screen.worker is None  # a bad path starts nothing, and says why
                assert "nowhere.jsonl" in str(screen.query_one("#load-knee", Static).render())
                levels.value = str(tmp_path / "watch.jsonl")
                levels.focus()
                await pilot.press("enter")  # Enter in a box starts it too
                await pilot.pause()
                assert screen.worker is not None
                await screen.worker.wait()
                await pilot.pause(0.3)
                lines = str(screen.query_one("#load-knee", Static).render()).splitlines()
                assert lines[0] == (f"Replayed 3 requests of {tmp_path / 'watch.jsonl'} "
                                    "(their recorded text)")
                assert lines[1].startswith("arrival gaps within ")
                log = read_log(lines[-1].removeprefix("log "))
                measured = [r for r in log.requests if r.phase == "measure"]
                assert sorted(r.load.replay_of for r in measured) == ids  # each its original
                assert log.header.load.replay["watch_log"] == str(tmp_path / "watch.jsonl")
        finally:
            await conn.close()
