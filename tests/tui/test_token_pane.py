"""The token pane following a streaming answer: it scrolls in jumps (each scroll repaints the
whole pane), and puts the last line at the bottom when the request ends."""

from __future__ import annotations

from pathlib import Path

from llmtop.sessions.measure.request import RequestCollector
from llmtop.tui.app import make_app
from llmtop.tui.state.live import LiveRequest
from llmtop.tui.state.settings import TuiSettings
from llmtop.tui.widgets.token_pane import FOLLOW_JUMP, TokenPane

from .fakes import ev, fake_connection, wait_for


async def test_following_jumps_a_third_of_the_pane_then_ends_at_the_bottom(
    tmp_path: Path,
) -> None:
    settings = TuiSettings(log_path=str(tmp_path / "s.jsonl"), probes=False)
    app = make_app(settings, connection=fake_connection())
    async with app.run_test(size=(140, 40)) as pilot:
        pane = app.query_one(TokenPane)
        live = LiveRequest(RequestCollector(prompt="p", options={}, model="m"))
        height = pane.scrollable_content_region.height
        jump = max(1, int(height * FOLLOW_JUMP))
        # the text is "› p", a blank line, then one line per chunk: n chunks = n + 2 lines
        for i in range(height - 2):
            live.add(ev(float(i), f"line {i}\n" if i < height - 3 else f"line {i}"))
        pane.show_live(live)
        await pilot.pause()
        assert pane.scroll_y == 0  # `height` lines: all in view
        live.add(ev(100.0, "\nover"))  # height + 1 lines: the last one is past the bottom
        pane.show_live(live)
        await pilot.pause()
        # the last line (index height) now has `jump` blank lines below it
        assert pane.scroll_y == 1 + jump
        for i in range(jump):  # these fill the blank lines: no scroll
            live.add(ev(200.0 + i, f"\nfill {i}"))
            pane.show_live(live)
            await pilot.pause()
            assert pane.scroll_y == 1 + jump
        live.add(ev(300.0, "\nnext"))  # past the bottom again: the next jump
        pane.show_live(live)
        await pilot.pause()
        lines = height + jump + 2
        assert pane.scroll_y == lines - height + jump
        live.finish(live.collector.finish(cancelled=True))  # adds a "[cancelled]" line
        pane.show_live(live)
        await pilot.pause()
        assert pane.scroll_y == lines + 1 - height  # the last line at the bottom
        assert pane.virtual_size.height == lines + 1  # trimmed to the text


async def test_a_reader_scrolled_up_is_not_moved(tmp_path: Path) -> None:
    settings = TuiSettings(log_path=str(tmp_path / "s.jsonl"), probes=False)
    app = make_app(settings, connection=fake_connection())
    async with app.run_test(size=(140, 40)) as pilot:
        # connected first: the connection's "ready" message replaces what the pane shows
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        pane = app.query_one(TokenPane)
        live = LiveRequest(RequestCollector(prompt="p", options={}, model="m"))
        for i in range(100):
            live.add(ev(float(i), f"line {i}\n"))
        pane.show_live(live)
        await pilot.pause()
        pane.scroll_to(y=10, animate=False, immediate=True)
        for i in range(20):
            live.add(ev(200.0 + i, f"more {i}\n"))
            pane.show_live(live)
        await pilot.pause()
        assert pane.scroll_y == 10
