"""A TUI request's record carries the throttles seen at its edges (runners/throttles.py),
as `llmtop run`'s does: the main screen hands the link's hook to the recorder."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtop.sessions.records.log import read_log
from llmtop.sessions.runners.throttles import ThrottleEdges
from tests.unit.test_throttle_edges import HOT, Readings

from .fakes import SENT_NS, wait_for
from .test_fake_engine import build, done, send


@pytest.fixture(autouse=True)
def fixed_send_stamp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("llmtop.sessions.measure.request.perf_counter_ns", lambda: SENT_NS)


async def test_a_tui_requests_record_names_the_throttle_it_saw(tmp_path: Path) -> None:
    app, _ = build(tmp_path)
    # the link's rule (an engine here, probes on) is tested in test_throttle_edges; here the
    # hook it gives: hot at the request's start, nothing at its end
    app.link.throttle_edges = lambda: ThrottleEdges(  # type: ignore[method-assign]
        Readings((HOT,), ())).edges()  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        await send(pilot, app, "hello")
        await wait_for(pilot, lambda: done(app), what="request done")
    (request,) = read_log(tmp_path / "s.jsonl").requests
    assert [(t.part, t.cause, t.device) for t in request.machine.throttle] == [
        ("CPU", "thermal", "thermal_zone1 x86_pkg_temp")]
