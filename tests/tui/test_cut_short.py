"""A cancelled request keeps the client's figures it has (issue 32, row 17; newcomer.md: "After
Esc at 104 chunks, the strip switches from the live "decode 1.x chunk/s" to "decode n/a · TPOT
n/a · E2E n/a", although the client has all 104 stamps")."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtop.tui.widgets.metrics_strip import gaps_scale

from .fakes import HANG, SENT_NS, FakeEngine, ev, fake_connection, shown, wait_for
from .test_fake_engine import build, drawn, send

# four chunks at 100, 150, 250 and 400 ms after the send, then nothing until Esc
STALLS = [ev(100.0, "a"), ev(150.0, " b"), ev(250.0, " c"), ev(400.0, " d"), HANG]


async def test_escape_keeps_the_chunk_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By hand: 4 chunks over 400 − 100 = 300 ms → (4 − 1) / 0.3 s = 10.0 chunk/s, so 100.00 ms
    per chunk; the last chunk 400.0 ms after the send; the gaps row per chunk as well."""
    monkeypatch.setattr("llmtop.sessions.measure.request.perf_counter_ns", lambda: SENT_NS)
    app, _ = build(tmp_path, fake_connection(FakeEngine(extra={"stalls": STALLS})))
    async with app.run_test(size=(140, 40)) as pilot:
        await send(pilot, app, "stalls")
        main = app.main_screen
        await wait_for(pilot, lambda: main.live is not None and main.live.chunks == 4, what="4")
        await pilot.press("escape")
        await wait_for(pilot, lambda: drawn(app), what="cancelled and drawn")
        assert shown(app, "#count") == "chunks 4"
        assert shown(app, "#decode") == "decode 10.0 chunk/s"
        assert shown(app, "#client") == (
            " cancelled   TPOT 100.00 ms/chunk · last chunk 400.0 ms (chunks, cancelled)"
        )
        assert shown(app, "#itl-label") == "chunk gaps ms  TPOT 100.00 ms/chunk · 10.0 chunk/s"


def test_gaps_scale_by_hand() -> None:
    """Gaps 20, 30, 4600 ms: max 4600.0, median 30.0; none: no scale."""
    assert gaps_scale([20.0, 4600.0, 30.0]) == "max 4600.0 · p50 30.0 ms"
    assert gaps_scale([]) == ""
