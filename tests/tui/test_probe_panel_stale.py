"""A sample whose process read gave up: the panel keeps the last process data, marked stale
with its age; with no sample at all for a while, the border says how old the data is."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from llmtop.probes.catalogue import Category
from llmtop.probes.verdict import Verdict
from llmtop.tui.app import make_app
from llmtop.tui.messages import ProbeSampled
from llmtop.tui.settings import TuiSettings
from llmtop.tui.widgets.probe_panel import STALE_AFTER_S, ProbePanel

from .fakes import FakeConnection, wait_for
from .test_probe_panel import app_usage, sample


async def test_stale_process_data_is_marked_with_its_age(tmp_path: Path) -> None:
    settings = TuiSettings(log_path=str(tmp_path / "s.jsonl"), probes=False)
    app = make_app(settings, connection=FakeConnection())  # type: ignore[arg-type]
    async with app.run_test(size=(140, 40)) as pilot:
        panel = app.query_one(ProbePanel)
        good = dataclasses.replace(
            sample(10.0, (app_usage("slack", 12.0, Category.CHAT),), Verdict.of([]), 1.0),
            t_ns=1_000_000_000,
        )
        app.post_message(ProbeSampled(good))
        await wait_for(pilot, lambda: panel.sample is good, what="good sample drawn")
        # 2.5 s later the process read gave up: no process data in this sample
        gave_up = dataclasses.replace(good, t_ns=3_500_000_000, processes=None)
        app.post_message(ProbeSampled(gave_up))
        await wait_for(pilot, lambda: panel.sample is gave_up, what="stale sample drawn")
        await pilot.pause(0.1)
        text = panel.plain
        assert "stale: process data from 2.5 s ago" in text
        assert "slack" in text and "process probe failed" not in text
        shown = panel._shown_ns
        assert shown is not None
        assert panel.check_age(shown + 1_000_000_000) == 1.0 and panel.border_title == "machine"
        later = shown + int((STALE_AFTER_S + 2) * 1e9)
        assert panel.check_age(later) == STALE_AFTER_S + 2
        assert panel.border_title == f"machine — stale, {STALE_AFTER_S + 2:.0f} s old"
