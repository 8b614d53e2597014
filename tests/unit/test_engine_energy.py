"""The measured engine's own energy on macOS (probes/energy/process.py): proc_pid_rusage's
ri_energy_nj summed over the engine's processes, through a fake replaying the trace in
tests/fixtures/apple/engine_rusage_trace.json (its rates from monitors that read the field);
libproc is never loaded off macOS."""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import pytest

from llmtop.probes.energy import EnergyReader
from llmtop.probes.energy.process import (
    NAME,
    RusageInfoV6,
    engine_source,
    load_libproc,
)
from llmtop.probes.energy.reader import Discovery
from llmtop.sessions.runners.energy import with_engine_source
from tests.unit.test_apple_energy import StepClock

TRACE = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "apple"
                    / "engine_rusage_trace.json").read_text())


class Replay:
    """ri_energy_nj by pid at the clock's row (None: the pid did not exist yet)."""

    def __init__(self, clock: StepClock) -> None:
        self.clock = clock
        self.asked: list[int] = []

    def __call__(self, pid: int) -> int | None:
        self.asked.append(pid)
        values = TRACE["pids"].get(str(pid))
        return None if values is None else values[self.clock.i]


def trace_reader() -> tuple[EnergyReader, list[int]]:
    stamps = [round(t * 1e9) for t in TRACE["t_s"]]
    clock = StepClock(stamps)
    source, why = engine_source(lambda: (101, 102, 103), system="darwin",
                                energy_nj=Replay(clock), clock=clock)
    assert why is None and source is not None
    reader = EnergyReader([source], clock=clock)
    for i in range(len(stamps)):
        clock.i = i
        reader.sample()
    return reader, stamps


def test_the_struct_matches_the_sdks_layout() -> None:
    # <sys/resource.h> rusage_info_v6: uint8 ri_uuid[16], then 56 uint64 (44 named, 12 more
    # reserved or neural-footprint); ri_energy_nj is the 41st uint64: 16 + 40 × 8 = 336
    assert ctypes.sizeof(RusageInfoV6) == 16 + 56 * 8 == 464
    assert RusageInfoV6.ri_energy_nj.offset == 336  # type: ignore[attr-defined]
    assert RusageInfoV6.ri_billed_energy.offset == 16 + 31 * 8  # type: ignore[attr-defined]


def test_libproc_is_never_loaded_off_macos() -> None:
    assert load_libproc("linux") == (
        None, "per-process energy is read on macOS only (proc_pid_rusage)")
    asked: list[int] = []
    found = Discovery(())
    assert with_engine_source(found, lambda: asked.append(1) or ()) is found and asked == []


def test_engine_joules_per_token_from_the_trace() -> None:
    reader, stamps = trace_reader()
    # running total of increments, nJ: row 0 the baselines; row 1: 3,027,000,000 + 5,045,000
    # = 3,032,045,000; row 2 the same again (pid 103's first reading is its baseline):
    # 6,064,090,000; row 3: + 3,032,045,000 + 100,000,000 (pid 103) = 9,196,135,000
    e = reader.group_request(NAME, (NAME,), stamps[0], stamps[1], stamps[3], 120, 64)
    assert e.prefill is not None and e.decode is not None
    assert e.prefill.joules == pytest.approx(3.032045, abs=1e-9)
    # decode: 9.196135 − 3.032045 = 6.16409 J over 64 tokens = 0.0963139 J/token
    assert e.decode.joules == pytest.approx(6.16409, abs=1e-9)
    assert e.j_per_output_token == pytest.approx(6.16409 / 64, abs=1e-9)
    # over the real window: 9.196135 J / 3.027 s = 3.0380 W
    assert e.total.mean_power_w == pytest.approx(9.196135 / 3.027, abs=1e-6)


def test_a_pid_gone_or_refused_is_said_and_none_read_is_a_gap() -> None:
    clock = StepClock([0, 1_009_000_000])
    values = {0: {7: 100, 8: 50}, 1: {7: 180}}
    source, _ = engine_source(lambda: (7, 8), system="darwin",
                              energy_nj=lambda pid: values[clock.i].get(pid), clock=clock)
    assert source is not None
    assert source.read() == (0.0, None)
    clock.i = 1
    assert source.read() == (80.0, None)  # pid 7's 180 − 100; pid 8's last increment lost
    assert source.last_reason == ("engine pids [8] ended or were refused since the last "
                                  "read: their last increment is not counted")
    nobody, _ = engine_source(lambda: (), system="darwin", energy_nj=lambda pid: 1)
    assert nobody is not None and nobody.read() is None
    assert nobody.last_reason == "no engine process found"


def test_a_counter_that_went_back_restarts_its_baseline() -> None:
    # a pid reused by a new process: 500 → 20 is no energy, 20 → 70 is 50 nJ
    seq = iter([500, 20, 70])
    source, _ = engine_source(lambda: (9,), system="darwin", energy_nj=lambda pid: next(seq))
    assert source is not None
    assert [source.read() for _ in range(3)] == [(0.0, None), (0.0, None), (50.0, None)]


def test_a_meter_on_a_mac_adds_the_engines_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    # libproc stood in for: the meter given the engine's pids reads "apple:engine" beside
    # the machine's sources, and says it in its sources record
    from llmtop.probes.energy import process
    from llmtop.sessions.runners import energy

    clock = StepClock([0])
    monkeypatch.setattr(energy, "engine_source", lambda pids: process.engine_source(
        pids, system="darwin", energy_nj=Replay(clock), clock=clock))
    meter = energy.EnergyMeter(Discovery(()), engine_pids=lambda: {101, 102})
    assert meter.active and meter.reader is not None
    assert [label for label, _ in meter.reader.groups()] == [NAME]
    record = meter.sources_record()
    assert [s["name"] for s in record.sources] == [NAME]
    assert "proc_pid_rusage ri_energy_nj" in record.sources[0]["covers"]
    # an engine elsewhere: nothing of this machine is read, the engine's processes neither
    remote = energy.EnergyMeter(remote_host="10.0.0.2:11434", engine_pids=lambda: {101})
    assert not remote.active
