"""The bench screen (Ctrl+B) on the scripted engine: progress, verdict, report, log, noise.

The fake's generated requests (fakes.py) have exact timelines. With a 64-token target the
calibration converges on 38 words (19 + 38 + the 7-word instruction = 64 tokens), so every
request has prefill 64 × 0.5 = 32 ms, TTFT 2 + 32 + 5 = 39 ms and, with 8 output tokens one
per 10 ms, E2E 39 + 7 × 10 + 1 = 110 ms and a server decode rate of 8 tokens over the 7 gaps
between them, 8 / 70 ms = 114.3 tok/s.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.message import Message
from textual.widgets import ProgressBar, Static

from llmtop.sessions.records.log import read_log
from llmtop.sessions.records.schema import BenchMarkRecord
from llmtop.tui.app import LlmtopApp, make_app
from llmtop.tui.messages import ProbeSampled
from llmtop.tui.screens.bench import BenchScreen
from llmtop.tui.screens.report import ReportScreen
from llmtop.tui.state.settings import TuiSettings
from llmtop.tui.widgets.bench_form import BenchForm
from llmtop.tui.widgets.bench_series import BenchSeries, series_text
from llmtop.tui.widgets.probe_panel import ProbePanel

from .fakes import FakeEngine, Timing, fake_connection, probe_sample, shown, wait_for

NOISE = "Chromium (14 processes) is using 38 % CPU"


def build(
    tmp_path: Path, engine: FakeEngine, monkeypatch: pytest.MonkeyPatch, preflight_s: float = 0
) -> LlmtopApp:
    """An app on `engine` with the tiny bench as the form's defaults (no calibration cache;
    no preflight unless asked: it samples the real machine)."""
    monkeypatch.setattr("llmtop.sessions.measure.request.perf_counter_ns", engine.clock)
    settings = TuiSettings(
        engine="fake",
        options={"temperature": 0.0, "seed": 42, "num_predict": 8, "num_ctx": 2048},
        log_path=str(tmp_path / "s.jsonl"),
        probes=False,
        bench_requests=10,
        bench_warmup=1,
        bench_prompt_tokens=(64,),
        bench_max_tokens=8,
        bench_use_cache=False,
        bench_preflight_s=preflight_s,
    )
    return make_app(settings, connection=fake_connection(engine))


async def open_bench(pilot, app: LlmtopApp) -> BenchScreen:  # type: ignore[no-untyped-def]
    """Ctrl+B once the engine is ready; the bench screen it opens."""
    await wait_for(pilot, lambda: app.link.ready, what="connection")
    await pilot.press("ctrl+b")
    await wait_for(pilot, lambda: isinstance(app.screen, BenchScreen), what="bench screen")
    screen = app.screen
    assert isinstance(screen, BenchScreen)
    return screen


async def open_and_start(pilot, app: LlmtopApp) -> BenchScreen:  # type: ignore[no-untyped-def]
    screen = await open_bench(pilot, app)
    await pilot.click("#bench-start")
    return screen


def drawn(screen: BenchScreen) -> bool:
    """The run ended and the screen drew all of it (progress, series, verdict)."""
    state = screen.state
    if state is None or not state.finished:
        return False
    return not (state.progress_dirty or state.series_dirty or state.summary_dirty)


async def finish(pilot, screen: BenchScreen, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    """Poll until the run ended and the screen drew it."""
    await wait_for(pilot, lambda: drawn(screen), timeout_s, "the bench drawn")


def series_lines(screen: BenchScreen) -> list[str]:
    """The series the screen was given, as `series_text` draws it 120 cells wide."""
    return series_text(screen.query_one(BenchSeries).rows, 120).plain.splitlines()


async def test_flat_series_is_clean_with_report_and_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = build(tmp_path, FakeEngine(), monkeypatch, preflight_s=0.2)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = await open_and_start(pilot, app)
        await finish(pilot, screen)
        assert screen.state is not None and screen.state.error is None, screen.state.error
        preflight, calibration = screen.state.detail.splitlines()
        assert preflight.startswith(("preflight QUIET", "preflight NOISY"))
        assert calibration == "calibration measured: 64 tok → 38 words (64)"
        bar = screen.query_one(ProgressBar)
        assert bar.total == 11 and bar.progress == 11  # 1 warm-up + 10 requests
        assert shown(screen, "#bench-phase") == "done"
        summary = shown(screen, "#bench-summary")
        assert summary.startswith(" CLEAN ")
        assert "64 tok  n 10 · 1 warm-up kept apart · 0 excluded" in summary
        for part in ("TTFT 39.0 ms", "prefill 32.0 ms", "decode 114.3 tok/s", "E2E 110.0 ms"):
            assert part in summary
        assert "no request ran during a NOISY probe sample" in summary
        rows = series_lines(screen)
        assert rows[3].startswith("status        w··········  ")  # the warm-up, then 10 ok
        assert rows[4] == "NOISY" + " " * 20 + "  no NOISY probe sample during a request"
        log_path = Path(screen.log_path or "")
        assert log_path.parent == tmp_path and log_path.name.startswith("s.bench-")
        assert summary.endswith(f"log {log_path}  R: full report")
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ReportScreen), what="report")
        report = app.screen
        assert isinstance(report, ReportScreen)
        assert "## Results" in report.markdown and "**Verdict: CLEAN**" in report.markdown
        await pilot.press("escape")  # closes the report
        await pilot.press("escape")  # leaves the bench screen
        await wait_for(pilot, lambda: app.screen is app.default_screen, what="main screen")
    assert log_path.exists()
    log = read_log(log_path)
    assert log.header.kind == "bench"
    assert [r.phase for r in log.requests] == ["load"] + ["warmup"] + ["measure"] * 10
    summary_record = log.summary
    assert summary_record is not None
    assert summary_record.contaminated is False and summary_record.ok_requests == 10
    session = list(read_log(tmp_path / "s.jsonl").of_type(BenchMarkRecord))
    assert [(r.phase, r.log) for r in session] == [
        ("start", str(log_path)),
        ("end", str(log_path)),
    ]
    assert session[1].outcome == "CLEAN"


async def test_decode_slowing_down_is_contaminated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # gap_j = 10 ms × (1 + 0.04 j), j = 0 the warm-up, 1..10 measured; first-5 median at j = 3
    # (gap 11.2 ms), last-5 median at j = 8 (13.2 ms). Decode (server) 1/gap: 11.2/13.2 − 1 =
    # −15.2 %; E2E 40 + 7 gap: 132.4/118.4 − 1 = +11.8 %; TPOT (7 gap + 1)/7: 93.4/79.4 − 1 =
    # +17.6 %; decode (client) 7/(7 gap + 1): 79.4/93.4 − 1 = −15.0 %. TTFT and prefill flat.
    app = build(tmp_path, FakeEngine(timing=Timing(growth=0.04)), monkeypatch)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = await open_and_start(pilot, app)
        await finish(pilot, screen)
        summary = shown(screen, "#bench-summary")
        assert summary.startswith(" CONTAMINATED ")
        headline = summary.splitlines()[0]
        # the decode rate is a trend the whole way: 1/gap from j = 1 to 10 falls 1.04/1.40 − 1
        # = −25.7 %, the fitted line's −26 % (analysis/episodes.py); and the drift rule's
        # figures above. TPOT drifts too but does not decide (1000 / client decode)
        assert headline.startswith(" CONTAMINATED  64 tok: decode (server) tok/s is a trend the "
                                   "whole way (-26 % from the first to the last request)")
        assert headline.endswith(
            "drifted between the first and last 5 baseline requests: E2E ms +11.8 %, "
            "decode (client) tok/s -15.0 %, decode (server) tok/s -15.2 %"
        )
        assert "TTFT ms" not in headline and "prefill" not in headline
        assert screen.query_one(ProgressBar).progress == 11


async def test_request_with_a_noisy_sample_is_marked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app: LlmtopApp | None = None

    def on_start(j: int, send_ns: int) -> None:
        if j == 3 and app is not None:  # measured request 3 = the 4th of the run
            app.post_message(ProbeSampled(probe_sample(send_ns + 1_000_000, NOISE)))
        elif j == 5 and app is not None:  # a QUIET sample marks nothing
            app.post_message(ProbeSampled(probe_sample(send_ns + 1_000_000)))

    app = build(tmp_path, FakeEngine(on_start=on_start), monkeypatch)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = await open_and_start(pilot, app)
        await finish(pilot, screen)
        noisy_row = series_lines(screen)[4]
        assert noisy_row == "NOISY            !         1 ran while the machine was NOISY"
        summary = shown(screen, "#bench-summary")
        assert f"! 1 request ran while the machine was NOISY: {NOISE} (#4 in run order)" in summary
        assert summary.startswith(" CLEAN ")  # noise is marked, not hidden


async def test_esc_cancels_the_run_and_the_log_records_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = FakeEngine(hang_at=3)  # measured request 3 hangs after its first token
    app = build(tmp_path, engine, monkeypatch)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = await open_and_start(pilot, app)
        await wait_for(pilot, lambda: engine.decoding == 4, what="the hanging request")
        await pilot.pause(0.2)
        assert screen.state is not None and screen.state.done == 3
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.default_screen, what="main screen")
        assert screen.state.cancelled
        log_path = screen.log_path
    assert log_path is not None
    log = read_log(log_path)
    assert log.interrupted
    statuses = [r.status for r in log.requests if r.phase != "load"]
    assert statuses == ["ok"] * 3 + ["cancelled"]
    session = list(read_log(tmp_path / "s.jsonl").of_type(BenchMarkRecord))
    assert session[-1].outcome == "cancelled"


async def test_esc_keeps_the_finished_run_for_the_next_ctrl_b(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New-user pass D15: Esc after a bench, then Ctrl+B, showed an empty form; the verdict,
    the series, the log and the report were gone. The reopened screen is a new one drawn
    from the run the app kept, with the form as that run was started."""
    app = build(tmp_path, FakeEngine(), monkeypatch)
    async with app.run_test(size=(160, 45)) as pilot:
        first = await open_bench(pilot, app)
        first.query_one("#bench-max-tokens").value = "6"  # type: ignore[attr-defined]
        await pilot.click("#bench-start")
        await finish(pilot, first)
        summary, rows = shown(first, "#bench-summary"), series_lines(first)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.default_screen, what="main screen")
        await pilot.press("ctrl+b")
        await wait_for(pilot, lambda: isinstance(app.screen, BenchScreen), what="bench again")
        again = app.screen
        assert isinstance(again, BenchScreen) and again is not first
        await wait_for(pilot, lambda: drawn(again), what="the kept run drawn")
        assert shown(again, "#bench-summary") == summary and summary.startswith(" CLEAN ")
        assert series_lines(again) == rows and shown(again, "#bench-phase") == "done"
        assert again.log_path == first.log_path
        assert again.query_one("#bench-max-tokens").value == "6"  # type: ignore[attr-defined]
        await pilot.press("r")  # the kept run's report
        await wait_for(pilot, lambda: isinstance(app.screen, ReportScreen), what="report")
        assert "**Verdict: CLEAN**" in app.screen.markdown  # type: ignore[attr-defined]


async def test_bad_form_value_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The form hands its raw texts to the screen (`BenchForm.StartRequested`, the contract
    between the two); the screen refuses a value that cannot run and says why."""
    requested: list[BenchForm.StartRequested] = []

    def hook(message: Message) -> None:  # sees a message at each node it bubbles through
        if isinstance(message, BenchForm.StartRequested) and message not in requested:
            requested.append(message)

    app = build(tmp_path, FakeEngine(), monkeypatch)
    async with app.run_test(size=(160, 45), message_hook=hook) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        await pilot.press("ctrl+b")
        await wait_for(pilot, lambda: isinstance(app.screen, BenchScreen), what="bench screen")
        screen = app.screen
        assert isinstance(screen, BenchScreen)
        screen.query_one("#bench-max-tokens").value = "1"  # type: ignore[attr-defined]
        await pilot.click("#bench-start")
        await wait_for(pilot, lambda: shown(screen, "#bench-summary").startswith("✗"), what="✗")
        assert [m.values for m in requested] == [  # the form defaults (build), one field edited
            {"requests": "10", "warmup": "1", "prompt-tokens": "64", "max-tokens": "1",
             "cache-pairs": "0", "turns": "0"}
        ]
        assert screen.worker is None
        assert shown(screen, "#bench-summary") == "✗ max tokens must be ≥ 2, got 1"


async def test_ctrl_b_stops_the_streaming_request_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = build(tmp_path, FakeEngine(), monkeypatch)
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        app.main_screen.send("slow")  # first chunk, then hangs
        main = app.main_screen
        await wait_for(pilot, lambda: main.live is not None and main.live.chunks == 1, what="chunk")
        await pilot.press("ctrl+b")
        await wait_for(pilot, lambda: isinstance(app.screen, BenchScreen), what="bench screen")
        assert app.main_screen.live is not None and app.main_screen.live.result is not None
        assert app.main_screen.live.result.status == "cancelled"
        app.main_screen.send("hello")  # refused while the bench screen is open
        await pilot.pause(0.1)
        assert app.main_screen.live.prompt == "slow"
    (req,) = read_log(tmp_path / "s.jsonl").requests
    assert req.status == "cancelled"


async def test_quit_during_a_bench_records_the_interruption(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = FakeEngine(hang_at=1)
    app = build(tmp_path, engine, monkeypatch)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = await open_and_start(pilot, app)
        await wait_for(pilot, lambda: engine.decoding == 2, what="the hanging request")
        await pilot.pause(0.1)
        await pilot.press("ctrl+q")
        log_path = screen.log_path
    assert log_path is not None
    log = read_log(log_path)
    assert log.interrupted and log.ended_at
    assert [r.status for r in log.requests][-1] == "cancelled"


async def test_narrow_terminal_shows_a_badge_instead_of_the_panel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = build(tmp_path, FakeEngine(), monkeypatch)
    async with app.run_test(size=(110, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        await pilot.press("ctrl+b")
        await wait_for(pilot, lambda: isinstance(app.screen, BenchScreen), what="bench screen")
        screen = app.screen
        sample = probe_sample(1, NOISE)
        app.post_message(ProbeSampled(sample))
        panel = screen.query_one(ProbePanel)
        await wait_for(pilot, lambda: panel.sample is sample, what="the sample drawn")
        assert not screen.query_one(ProbePanel).display
        badge = screen.query_one("#bench-badge", Static)
        assert badge.display and str(badge.content) == f" NOISY  {NOISE}"


async def test_the_form_runs_cache_pairs_and_a_conversation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The form's second row (issue 24): 1 cache pair and 2 turns after the sweep. The run
    logs, after the 10 measured requests of one size and its warm-up, 2 pair requests, 2
    turns and their 2 cold replays: the progress bar's total counts them all (11 + 2 + 4 = 17),
    and at 80 columns both rows and the Start button are wholly on screen."""
    app = build(tmp_path, FakeEngine(), monkeypatch)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_bench(pilot, app)
        for fid in ("bench-requests", "bench-cache-pairs", "bench-turns", "bench-start"):
            region = screen.query_one(f"#{fid}").region
            assert region.x >= 0 and region.right <= 80, (fid, region)
        screen.query_one("#bench-cache-pairs").value = "1"  # type: ignore[attr-defined]
        screen.query_one("#bench-turns").value = "2"  # type: ignore[attr-defined]
        await pilot.click("#bench-start")
        await wait_for(pilot, lambda: drawn(screen), what="the run drawn", timeout_s=60)
        state = screen.state
        assert state is not None and state.error is None, state.error if state else None
        assert state.total == 17 and state.done == 17
        log_path = screen.log_path
    assert log_path is not None
    phases = [r.phase for r in read_log(log_path).requests]
    assert phases.count("cache-cold") == phases.count("cache-warm") == 1
    assert phases.count("turn") == phases.count("turn-cold") == 2


def test_series_and_history_mark_the_episodes():
    from llmtop.tui.state.bench_state import MEASURE, WARMUP, BenchRow

    def row(n: int, ttft: float, episode: int | None = None, phase: str = MEASURE) -> BenchRow:
        return BenchRow(n, phase, 200, n - 1, "ok", "", ttft, ttft - 10, 20.0, (0, 1),
                        episode=episode)

    # a warm-up, then 1–3 at 100 ms and 4–6 in episode 1 at 130 ms, then 7 at 100 ms
    rows = [row(1, 900.0, phase=WARMUP)] + [
        row(n + 1, 130.0 if 4 <= n <= 6 else 100.0, 1 if 4 <= n <= 6 else None)
        for n in range(1, 8)]
    text = series_text(rows, 120)
    lines = text.plain.splitlines()
    status = next(line for line in lines if line.startswith("status"))
    assert status.split()[1] == "w···eee·"
    assert "e episode (slow, or faster than the baseline)" in text.plain
    # the TTFT sparkline's episode cells are magenta, the others cyan (the warm-up dim)
    ttft_line = next(i for i, line in enumerate(lines) if line.startswith("TTFT"))
    start = sum(len(line) + 1 for line in lines[:ttft_line])
    styles = {str(s.style) for s in text.spans if start <= s.start < start + len(lines[ttft_line])}
    assert "magenta" in styles and "cyan" in styles
