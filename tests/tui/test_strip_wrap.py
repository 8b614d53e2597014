"""The strip's " · "-joined lines break between parts, never inside one (new-user pass D20:
at 80 columns the server line read "… · overhead" / "8570.2 ms"), and again on a resize."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.text import Text

from llmtop.tui.widgets.quiet_static import QuietStatic

from .fakes import SENT_NS, wait_for
from .test_fake_engine import build, drawn, send

# the fake engine's figures (test_fake_engine: prefill 200.0, decode 75.0, load 10.0 ms,
# overhead 13.4 ms): 81 cells on one line
SERVER = "server  prefill 200.0 tok/s · decode 75.0 tok/s · load 10.0 ms · overhead 13.4 ms"


@pytest.fixture(autouse=True)
def fixed_send_stamp(monkeypatch: pytest.MonkeyPatch) -> None:
    """The send stamp the fake's event offsets are relative to."""
    monkeypatch.setattr("llmtop.sessions.measure.request.perf_counter_ns", lambda: SENT_NS)


async def test_the_server_line_breaks_at_a_separator_and_rejoins_when_wide(
    tmp_path: Path,
) -> None:
    app, _ = build(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await send(pilot, app, "hello")
        await wait_for(pilot, lambda: drawn(app), what="request done and drawn")
        server = app.query_one("#server", QuietStatic)
        await pilot.pause()
        width = server.content_size.width
        assert 0 < width < len(SERVER)
        shown = server.content
        assert isinstance(shown, Text)
        assert shown.plain.split("\n") == [
            "server  prefill 200.0 tok/s · decode 75.0 tok/s · load 10.0 ms",
            "  overhead 13.4 ms",
        ]
        assert server.size.height == 2
        await pilot.resize_terminal(140, 40)
        await wait_for(pilot, lambda: server.content_size.width >= len(SERVER),
                       what="the wider layout")
        await pilot.pause()
        shown = server.content
        assert isinstance(shown, Text) and shown.plain == SERVER
