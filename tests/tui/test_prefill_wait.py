"""Prefill you can watch: while a prompt waits for its first token, the metrics strip shows
what this model's saved curve predicts for it and how long it has waited (tui/state/prefill.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtop.sessions.analysis.prefill import Curve
from llmtop.sessions.runners.curves import CurveStore, SavedCurve, curve_key
from llmtop.tui.app import make_app
from llmtop.tui.state.prefill import PrefillExpectation, expectation_for, waiting_text
from llmtop.tui.state.settings import TuiSettings

from .fakes import HANG, FakeEngine, fake_connection, shown, wait_for

# prefill(ms) = 20 + 0.8·T: the template's 10 tokens + 1990 one-token words = 2,000 tokens
# → 20 + 1600 = 1620 ms
CURVE = Curve(20.0, 0.8, 0.0, (20, 20), (0.8, 0.8), (0, 0), 8, 32, 4096, 1.0, 0.0)
SAVED = SavedCurve(CURVE, "your curve from 2026-12-01 (b.jsonl)", 1.0, 10)
PROMPT = " ".join(["word"] * 1990)


def test_the_prediction_for_a_2000_token_prompt():
    expected = expectation_for(SAVED, PROMPT)
    assert expected == PrefillExpectation(2000, 1620.0, "your curve from 2026-12-01")
    assert waiting_text(expected, None) == (
        "prefill ≈ 1.6 s expected for ~2,000 tokens (your curve from 2026-12-01)"
    )
    assert waiting_text(expected, 1400.0) == (
        "prefill ≈ 1.6 s expected for ~2,000 tokens · 1.4 s so far (your curve from 2026-12-01)"
    )
    assert " · 2.1 s so far, 480 ms over (" in waiting_text(expected, 2100.0)
    assert expectation_for(None, PROMPT) is None  # no saved curve: nothing predicted
    assert expectation_for(SavedCurve(CURVE, "x"), PROMPT) is None  # no tokens per word


async def test_the_strip_shows_the_prediction_while_the_prompt_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    engine = FakeEngine(extra={PROMPT: [HANG]})  # never a first token
    CurveStore().store(curve_key(engine.name, engine.host, "fake-model"), SAVED)
    settings = TuiSettings(
        engine="fake", options={"num_predict": 8}, log_path=str(tmp_path / "s.jsonl"), probes=False
    )
    app = make_app(settings, connection=fake_connection(engine))
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        app.main_screen.send(PROMPT)
        head = "prefill ≈ 1.6 s expected for ~2,000 tokens"
        await wait_for(pilot, lambda: shown(app, "#client").startswith(head), what="prediction")
        assert shown(app, "#client").endswith("(your curve from 2026-12-01)")
        await wait_for(pilot, lambda: "so far" in shown(app, "#client"), what="the wait")
        await pilot.press("escape")


class RecordingEngine(FakeEngine):
    """The fake engine, keeping the messages of every request."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[list[dict[str, object]]] = []

    def stream_chat(self, model, messages, **kwargs):  # type: ignore[no-untyped-def,override]
        self.sent.append([dict(m) for m in messages])
        return super().stream_chat(model, messages, **kwargs)


async def test_ctrl_k_keeps_the_history_until_pressed_again(tmp_path: Path) -> None:
    engine = RecordingEngine()
    settings = TuiSettings(
        engine="fake", options={"num_predict": 8}, log_path=str(tmp_path / "s.jsonl"), probes=False
    )
    app = make_app(settings, connection=fake_connection(engine))

    def done(n: int) -> bool:
        return (
            app.link.recorder is not None
            and app.link.recorder.requests >= n
            and not (app.main_screen.live is not None and app.main_screen.live.streaming)
        )

    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        await pilot.press("ctrl+k")
        for n, prompt in enumerate(("hello", "think", "hello"), start=1):
            app.main_screen.send(prompt)
            await wait_for(pilot, lambda n=n: done(n), what=f"request {n}")
        await pilot.press("ctrl+k")  # the conversation ends: a single prompt again
        app.main_screen.send("hello")
        await wait_for(pilot, lambda: done(4), what="request 4")
    # the scripts answer "Hello world!" to hello and "Answer." to think (fakes.SCRIPTS)
    assert [len(m) for m in engine.sent] == [1, 3, 5, 1]
    assert engine.sent[2] == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "Hello world!"},
        {"role": "user", "content": "think"},
        {"role": "assistant", "content": "Answer."},
        {"role": "user", "content": "hello"},
    ]


async def test_the_plots_screen_draws_the_context_of_a_bench(tmp_path: Path, monkeypatch) -> None:
    import asyncio as aio

    from textual.app import App
    from textual.widgets import Static
    from textual_plotext import PlotextPlot

    from llmtop.connect import connect
    from llmtop.sessions.measure.config import BenchConfig
    from llmtop.sessions.runners.bench import BenchRunner
    from llmtop.testing.context import ContextUpstream, Prefill
    from llmtop.tui.screens.plots import PlotsScreen

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = str(tmp_path / "b.jsonl")
    with ContextUpstream(Prefill(20.0, 0.8, 4e-4), cache="count") as up:
        conn = await connect("ollama", up.url, "slotted")
        try:
            cfg = BenchConfig(
                requests=2,
                warmup=0,
                prompt_tokens=(32, 64, 128),
                max_tokens=4,
                preflight_s=0,
                save_curve=False,
                cache_pairs=1,
                turns=3,
            )
            await BenchRunner(conn, cfg, path).run()
        finally:
            await conn.close()
    await aio.sleep(0)

    class Host(App[None]):
        def on_mount(self) -> None:
            self.push_screen(screen)

    screen = PlotsScreen(path)
    async with Host().run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: screen.series != [], what="series")
        await pilot.press("c")
        await pilot.pause()
        assert str(screen.query_one("#plots-title", Static).render()).startswith(
            f"context (c: back) · {path}"
        )  # a sweep, a pair and turns: nothing missing
        assert screen.sweep is not None and screen.sweep.prefill is not None
        drawn = str(screen.query_one("#plot-ttft", PlotextPlot).render())
        assert screen.sweep.prefill.formula() in drawn
        assert "cold vs warm" in str(screen.query_one("#plot-itl-hist", PlotextPlot).render())
        assert [t.turn for t in screen.turns] == [1, 2, 3] and len(screen.pairs) == 1
        await pilot.press("c")  # back to the per-size plots
        await pilot.pause()
        assert str(screen.query_one("#plots-title", Static).render()).startswith("32 tok")
