"""The TUI says "it says 100 % GPU, so why is it slow?" under the request it was seen in: the
engine's claim (its model_info: /api/ps's size_vram of size) against the probe samples taken
during the request and its end sample (analysis/offload.py), drawn beside the NOISY mark."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtop.engines.base import ModelInfo
from llmtop.probes.catalogue import Category
from llmtop.probes.verdict import Verdict
from llmtop.tui.messages import ProbeSampled

from .fakes import (
    MS,
    SENT_NS,
    FakeEngine,
    app_usage,
    fake_connection,
    machine_sample,
    shown,
    wait_for,
)
from .test_fake_engine import build, done, send


class ClaimingEngine(FakeEngine):
    """The fake engine, whose /api/ps says the whole model (4 GB) is in GPU memory; counts
    how often it is asked."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    async def model_info(self, model: str) -> ModelInfo:
        self.asked += 1
        return ModelInfo(name=model, size=4_000_000_000, size_vram=4_000_000_000)


def engine_sample(t_ms: float, engine_cpu: float):  # type: ignore[no-untyped-def]
    """A sample taken `t_ms` after the send: the measured engine at `engine_cpu` % of a
    core, QUIET, no GPU probe (None: not read)."""
    apps = (app_usage("ollama", engine_cpu, Category.ENGINE),)
    return machine_sample(SENT_NS + int(t_ms * MS), 20.0, apps, Verdict.of(()), 1.0)


@pytest.fixture(autouse=True)
def fixed_send_stamp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("llmtop.sessions.measure.request.perf_counter_ns", lambda: SENT_NS)


async def test_a_runner_on_the_cpu_under_a_claim_of_all_on_the_gpu_is_shown(
        tmp_path: Path) -> None:
    engine = ClaimingEngine()
    app, _ = build(tmp_path, fake_connection(engine))
    async with app.run_test(size=(140, 40)) as pilot:
        await send(pilot, app, "hello")  # sent at SENT_NS, done at +200 ms
        await wait_for(pilot, lambda: done(app), what="request done")
        live = app.main_screen.live
        assert live is not None and live.result is not None
        app.post_message(ProbeSampled(engine_sample(100.0, 200.0)))  # during it
        app.post_message(ProbeSampled(engine_sample(900.0, 220.0), live))  # its end sample
        await wait_for(pilot, lambda: live.offload is not None, what="the offload finding")
        await wait_for(pilot, lambda: not live.numbers_dirty, what="numbers drawn")
        f = live.offload
        assert f is not None and engine.asked == 1
        # median of 2.0 and 2.2 cores = 2.1 >= 2: fail
        assert (f.code, f.level, f.value) == ("offload-mismatch", "fail", 2.1)
        m = live.result.metrics
        rate = m.server_decode_tps or m.client_decode_tps
        assert rate is not None
        text = shown(app, "#offload")
        assert text.startswith("⚠ GPU: the engine says the model is 100 % on the GPU, but its "
                               "processes used 2.1 cores of CPU during the request, decode "
                               f"{rate:.1f} tok/s\n  → likely causes: a context larger")
        assert "num_gpu" in text


async def test_an_agreeing_machine_asks_the_engine_nothing_and_shows_nothing(
        tmp_path: Path) -> None:
    engine = ClaimingEngine()
    app, _ = build(tmp_path, fake_connection(engine))
    async with app.run_test(size=(140, 40)) as pilot:
        await send(pilot, app, "hello")
        await wait_for(pilot, lambda: done(app), what="request done")
        live = app.main_screen.live
        assert live is not None
        # 0.6 cores: one thread feeding the GPU; the claim would agree
        app.post_message(ProbeSampled(engine_sample(900.0, 60.0), live))
        await wait_for(pilot, lambda: app.latest_probe is not None, what="the sample taken")
        await pilot.pause()
        await app.workers.wait_for_complete()
        assert (engine.asked, live.offload) == (0, None)
        assert shown(app, "#offload") == ""



class BrokenEngine(ClaimingEngine):
    """An engine whose /api/ps answer cannot be read (any error, not only EngineError)."""

    async def model_info(self, model: str) -> ModelInfo:
        self.asked += 1
        raise RuntimeError("connection reset mid-answer")


async def test_an_engine_that_cannot_say_loses_the_finding_not_the_app(tmp_path: Path) -> None:
    engine = BrokenEngine()
    app, _ = build(tmp_path, fake_connection(engine))
    async with app.run_test(size=(140, 40)) as pilot:
        await send(pilot, app, "hello")
        await wait_for(pilot, lambda: done(app), what="request done")
        live = app.main_screen.live
        assert live is not None
        app.post_message(ProbeSampled(engine_sample(900.0, 250.0), live))  # contradicts
        await wait_for(pilot, lambda: engine.asked == 1, what="the engine asked")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.is_running and live.offload is None
        await send(pilot, app, "think")  # the app still measures
        await wait_for(pilot, lambda: done(app, 2), what="second request")


def test_a_sample_the_log_reader_would_refuse_is_left_out() -> None:
    from llmtop.tui.link import _probe_record

    # a CPU figure of NaN: the session log's reader refuses the record (check_numbers), so
    # the offload rule, which reads samples as the log gives them back, leaves it out
    bad = machine_sample(SENT_NS, float("nan"), (), Verdict.of(()), 1.0)
    good = engine_sample(100.0, 200.0)
    assert _probe_record(bad) is None
    record = _probe_record(good)
    assert record is not None and record.processes is not None
    assert [(a.app, a.cpu_percent) for a in record.processes.apps] == [("ollama", 200.0)]
