"""The metrics strip's energy row (issue 26): a request's J per output token where a source
is read, nothing otherwise.

The fake engine's clock moves to each event's stamp as it is yielded, and the fake RAPL
counter reads 15 W × that clock, so the joules are exact: the "hello" script (fakes.py) is
sent at SENT_NS, its first token arrives 123.4 ms later and its done chunk 200 ms after the
send, with the server's counts 20 prompt tokens and 3 output tokens (OK_STATS):
  decode  = 15 W × (200 − 123.4) ms = 1.149 J → 1.149 / 3 = 0.383 J per output token
  prefill = 15 W × 123.4 ms = 1.851 J → 1.851 / 20 = 0.09255 J per prompt token (shown
            to 3 digits: 0.0925, the double nearest 0.09255 being just below it)
  total   = 15 W × 200 ms = 3 J
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input, Static

from llmtop.engines.events import StreamEvent
from llmtop.probes.energy import discover_sources
from llmtop.sessions.records.log import read_log
from llmtop.sessions.runners.energy import EnergyMeter
from llmtop.tui.app import make_app
from llmtop.tui.state.settings import TuiSettings

from .fakes import FakeEngine, fake_connection, type_text, wait_for

WATTS = 15
MAX_RANGE = 262143328850


class NoGpu:
    class NVMLError(Exception):
        pass

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 0


class SteppingEngine(FakeEngine):
    """FakeEngine on this machine's loopback, whose clock follows the events it yields."""

    host = "http://127.0.0.1:1"

    def stream_chat(
        self,
        model: str,
        messages: list[Mapping[str, Any]],
        *,
        options: Mapping[str, Any] | None = None,
        **kw: Any,
    ) -> AsyncIterator[StreamEvent]:
        inner = super().stream_chat(model, messages, options=options, **kw)

        async def gen() -> AsyncIterator[StreamEvent]:
            async for event in inner:
                self.clock.now = event.t_ns
                yield event

        return gen()


def fake_meter(root: Path, engine: FakeEngine) -> EnergyMeter:
    zone = root / "intel-rapl:0"
    zone.mkdir(parents=True)
    (zone / "name").write_text("package-0\n")
    (zone / "max_energy_range_uj").write_text(f"{MAX_RANGE}\n")

    def read(path: Path) -> str:
        if path.name == "energy_uj":
            return str(WATTS * engine.clock() // 1000)  # µJ = W × ns / 1000
        return path.read_text().strip()

    found = discover_sources(root, root / "ps", nvml_lib=NoGpu(), platform="linux", read=read)
    return EnergyMeter(found, clock=engine.clock)


def app_on(
    tmp_path: Path, engine: FakeEngine, monkeypatch: pytest.MonkeyPatch, meter: EnergyMeter | None
) -> Any:
    monkeypatch.setattr("llmtop.sessions.measure.request.perf_counter_ns", engine.clock)
    settings = TuiSettings(engine="fake", log_path=str(tmp_path / "s.jsonl"), probes=False)
    app = make_app(settings, connection=fake_connection(engine))
    app.link.energy = meter  # what on_mount builds with the probes on, over the fake tree
    return app


async def send_hello(pilot: Any, app: Any) -> None:
    await wait_for(pilot, lambda: app.link.ready, what="connection")
    app.query_one("#prompt", Input).focus()
    await type_text(pilot, "hello")
    await pilot.press("enter")
    await wait_for(pilot, lambda: len(app.main_screen.session.requests) == 1,
                   what="request 1 ended")
    await wait_for(pilot, lambda: app.query_one("#client", Static).content != "", what="drawn")
    await pilot.pause(0.2)


async def test_the_strip_shows_j_per_token_from_the_fake_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = SteppingEngine()
    app = app_on(tmp_path, engine, monkeypatch, fake_meter(tmp_path / "powercap", engine))
    async with app.run_test(size=(140, 44)) as pilot:
        await send_hello(pilot, app)
        row = app.query_one("#energy", Static)
        assert row.display
        assert str(row.content) == ("energy 0.383 J/out tok · 0.0925 J/prompt tok · 3 J · rapl:cpu")
    (record,) = [e for e in read_log(tmp_path / "s.jsonl").energy if e.scope == "request"]
    assert record.output_j_per_token == pytest.approx(1.149 / 3, rel=1e-6)
    assert record.prompt_j_per_token == pytest.approx(1.851 / 20, rel=1e-6)
    assert record.energy_j == pytest.approx(3.0, rel=1e-6) and not record.coarse


async def test_without_a_source_the_strip_has_no_energy_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = SteppingEngine()
    none = EnergyMeter(
        discover_sources(tmp_path / "none", tmp_path / "ps", nvml_lib=NoGpu(), platform="linux")
    )
    app = app_on(tmp_path, engine, monkeypatch, none)
    async with app.run_test(size=(140, 44)) as pilot:
        await send_hello(pilot, app)
        assert not app.query_one("#energy", Static).display
    (sources,) = read_log(tmp_path / "s.jsonl").energy  # the line, logged once; no figures
    assert sources.scope == "sources" and sources.line == none.line
