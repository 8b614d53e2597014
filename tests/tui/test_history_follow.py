"""The history (F2) follows the newest request unless the user moved to another one
(new-user pass N18: after #9 and #10 the box still ended at #8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtop.tui.widgets.request_history import RequestHistory

from .fakes import SENT_NS, wait_for
from .test_fake_engine import build, drawn, send


@pytest.fixture(autouse=True)
def fixed_send_stamp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("llmtop.sessions.measure.request.perf_counter_ns", lambda: SENT_NS)


async def test_the_cursor_follows_new_rows_until_the_user_moves_it(tmp_path: Path) -> None:
    app, _ = build(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        for n in (1, 2):
            await send(pilot, app, f"p{n}")
            await wait_for(pilot, lambda n=n: drawn(app, n), what=f"request {n}")
        await pilot.press("f2")
        history = app.query_one(RequestHistory)
        await wait_for(pilot, lambda: len(history.rows) == 2, what="two rows")
        assert history.table.cursor_row == 1  # F2 opens on the newest
        await send(pilot, app, "p3")
        await wait_for(pilot, lambda: drawn(app, 3) and len(history.rows) == 3, what="row 3")
        await pilot.pause()
        assert history.table.cursor_row == 2  # followed
        history.table.focus()
        history.table.move_cursor(row=0)  # the user looks at #1
        await send(pilot, app, "p4")
        await wait_for(pilot, lambda: drawn(app, 4) and len(history.rows) == 4, what="row 4")
        await pilot.pause()
        assert history.table.cursor_row == 0  # stays where the user put it
