"""The bench screen on the REAL embedded engine (llama.cpp + the bundled Gemma 3 270M)."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import ProgressBar

from llmtop.sessions.records.log import read_log
from llmtop.tui.app import make_app
from llmtop.tui.screens.bench import BenchScreen
from llmtop.tui.state.settings import TuiSettings
from llmtop.tui.widgets.probe_panel import ProbePanel

from .fakes import shown, wait_for

pytestmark = pytest.mark.integration


async def test_tiny_bench_on_the_embedded_engine(tmp_path: Path) -> None:
    settings = TuiSettings(
        engine="embedded",
        options={"temperature": 0.0, "seed": 42, "num_predict": 8, "num_ctx": 2048},
        log_path=str(tmp_path / "session.jsonl"),
        probe_interval_s=0.5,
        bench_requests=3,  # drift needs 10 ok requests: the verdict is "n/a"
        bench_warmup=1,
        bench_prompt_tokens=(32,),
        bench_max_tokens=8,
        bench_use_cache=False,
        bench_preflight_s=0.5,
    )
    app = make_app(settings)
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(
            pilot, lambda: app.link.ready or app.link.connect_failure is not None, 120,
            "the embedded engine"
        )
        assert app.link.connect_failure is None, app.link.connect_failure
        await pilot.press("ctrl+b")
        await wait_for(pilot, lambda: isinstance(app.screen, BenchScreen), what="bench screen")
        screen = app.screen
        assert isinstance(screen, BenchScreen)
        await pilot.click("#bench-start")
        await wait_for(
            pilot, lambda: screen.state is not None and screen.state.finished, 240, "the bench"
        )
        await pilot.pause(0.3)
        state = screen.state
        assert state is not None and state.error is None, state.error
        assert state.outcome is not None and state.outcome.analysis.ok_count == 3
        bar = screen.query_one(ProgressBar)
        assert bar.total == 4 and bar.progress == 4
        summary = shown(screen, "#bench-summary")
        # 3 requests are too few for the drift rule (10): "n/a" — unless the probes called
        # the machine NOISY during more than a tenth of them (verdict.NOISY_SHARE: 1 of 3
        # is enough), which makes any run CONTAMINATED (analysis/verdict.py)
        from llmtop.sessions.analysis.verdict import too_noisy

        so_far = read_log(Path(screen.log_path or ""))
        measured = {r.id for r in so_far.requests if r.phase == "measure"}
        noisy = {p.request_id for p in so_far.probes if p.noisy and p.request_id in measured}
        if too_noisy((len(noisy), 3)):
            assert summary.startswith(" CONTAMINATED "), summary
            assert f"NOISY during {len(noisy)} of the 3 measured requests" in summary
        else:
            assert summary.startswith(" n/a ") and "this run has 3" in summary, summary
        assert "32 tok  n 3" in summary and "TTFT " in summary
        assert state.report_md is not None and "## Results" in state.report_md
        assert app.latest_probe is not None  # the app's sampler kept running
        assert screen.query_one(ProbePanel).sample is not None  # and the bench screen shows it
        log_path = Path(screen.log_path or "")
    log = read_log(log_path)
    assert [r.phase for r in log.requests] == ["load", "warmup"] + ["measure"] * 3
    assert log.summary and log.preflight
