"""Apple Silicon energy per rail through zeus-apple-silicon, on Linux: the library is replaced
by a fake that replays recorded (or, for the M4 trace, constructed and said so) cumulative
readings from tests/fixtures/apple/, each file citing where its values come from."""

from __future__ import annotations

import json
import sys
import tomllib
import types
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from llmtop.probes.energy import EnergyReader, describe_sources, discover_sources
from llmtop.probes.energy.apple import (
    FROZEN_SPAN_S,
    LIBRARY,
    AppleRailSource,
    CumulativeReader,
    discover_apple,
    load_library,
    rail_of,
    rail_power_w,
    rails_from_channels,
)
from llmtop.probes.energy.window import idle_power

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "apple"
ROOT = Path(__file__).resolve().parents[2]


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


class FakeMonitor:
    """zeus_apple_silicon.AppleEnergyMonitor replaying rows of cumulative mJ fields."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self.calls = 0

    def get_cumulative_energy(self) -> types.SimpleNamespace:
        row = self.rows[min(self.calls, len(self.rows) - 1)]
        self.calls += 1
        return types.SimpleNamespace(**row)


def fake_library(rows: list[dict[str, Any]]) -> types.ModuleType:
    lib = types.ModuleType(LIBRARY)
    monitor = FakeMonitor(rows)
    lib.AppleEnergyMonitor = lambda: monitor  # type: ignore[attr-defined]
    lib.monitor = monitor  # type: ignore[attr-defined]
    return lib


def m4_rows() -> tuple[list[int], list[dict[str, Any]]]:
    trace = fixture("m4_trace.json")
    fields = ("cpu_total_mj", "gpu_mj", "dram_mj", "ane_mj", "gpu_sram_mj")
    stamps = [round(t * 1e9) for t in trace["t_s"]]
    rows = [{f: trace[f][i] for f in fields} for i in range(len(stamps))]
    return stamps, rows


class StepClock:
    """perf_counter ns stand-in: each sample's reads happen at that sample's stamp."""

    def __init__(self, stamps: list[int]) -> None:
        self.stamps = stamps
        self.i = 0

    def __call__(self) -> int:
        return self.stamps[self.i]


def m4_reader() -> tuple[EnergyReader, list[int]]:
    stamps, rows = m4_rows()
    clock = StepClock(stamps)
    rails, why = discover_apple(fake_library([rows[0], *rows]), cpu_busy=lambda: 50.0,
                                clock=clock)
    assert why is None
    reader = EnergyReader(rails, clock=clock)
    for i in range(len(stamps)):
        clock.i = i
        reader.sample()
    return reader, stamps


# --- the library is installed and imported on macOS arm64 only -------------------------------


def test_pyproject_marks_zeus_for_macos_arm64_only() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    reqs = [Requirement(r) for r in data["project"]["dependencies"]]
    zeus = [r for r in reqs if r.name == "zeus-apple-silicon"]
    assert len(zeus) == 1 and zeus[0].marker is not None
    linux = {"sys_platform": "linux", "platform_machine": "x86_64"}
    linux_arm = {"sys_platform": "linux", "platform_machine": "aarch64"}
    intel_mac = {"sys_platform": "darwin", "platform_machine": "x86_64"}
    windows = {"sys_platform": "win32", "platform_machine": "AMD64"}
    mac = {"sys_platform": "darwin", "platform_machine": "arm64"}
    for env in (linux, linux_arm, intel_mac, windows):
        assert not zeus[0].marker.evaluate(env), env
    assert zeus[0].marker.evaluate(mac)


def test_library_is_not_imported_off_apple_silicon(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, LIBRARY, None)  # an import would raise ImportError
    lib, why = load_library("linux", "x86_64")
    assert lib is None and why == "Apple: IOReport energy is read on macOS on Apple Silicon only"
    lib, why = load_library("darwin", "x86_64")  # an Intel Mac
    assert lib is None and "Apple Silicon only" in (why or "")


def test_missing_library_on_a_mac_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, LIBRARY, None)
    lib, why = load_library("darwin", "arm64")
    assert lib is None and "pip install zeus-apple-silicon" in (why or "")


def test_fake_library_is_imported_through_sys_modules_on_a_mac(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _, rows = m4_rows()
    fake = fake_library(rows)
    monkeypatch.setitem(sys.modules, LIBRARY, fake)
    lib, why = load_library("darwin", "arm64")
    assert lib is fake and why is None
    rails, why = discover_apple(system="darwin", machine="arm64", cpu_busy=lambda: 0.0)
    # ANE has a channel (its counter stands still at rest): a source all the same
    assert why is None and [r.info.name for r in rails] == [
        "apple:cpu", "apple:gpu", "apple:ane", "apple:dram"]


# --- channels by name, units ------------------------------------------------------------------


def test_channel_names_map_to_rails_and_parts_are_left_out() -> None:
    assert rail_of("GPU Energy") == "gpu"
    assert rail_of("CPU Energy") == "cpu" and rail_of("DIE_1_CPU Energy") == "cpu"
    assert rail_of("ANE") == rail_of("ANE0") == rail_of("ANE0_1") == "ane"
    assert rail_of("DRAM0") == rail_of("DRAM0_1") == "dram"
    for part in ("DIE_0_EACC_CPU0", "DIE_0_PACC0_CPM", "DIE_0_EACC_CPU0_SRAM", "GPU SRAM",
                 "PCPU1DTL01", "EACC_CPU", "GPU0"):
        assert rail_of(part) is None, part


def test_recorded_m1_ultra_sample_gives_the_recorded_watts() -> None:
    data = fixture("ioreport_channels.json")
    rails = rails_from_channels((n, u, v) for n, u, v in data["m1ultra_sample_045"])
    # cpu 7497 + 2627 = 10124 mJ; ane 58 + 7 = 65; dram 1065 + 1051 = 2116;
    # gpu 494880 nJ = 0.49488 mJ (nJ → mJ: × 1e-6); the per-core, CPM and SRAM parts not added
    assert rails == pytest.approx({"cpu": 10124.0, "ane": 65.0, "dram": 2116.0,
                                   "gpu": 0.49488})
    watts = {r: mj / 1000 / data["window_s"] for r, mj in rails.items()}
    # the PR's own line: cpu=20.36W ane=0.13W dram=4.26W (10124 mJ / 497.2 ms = 20.362 W)
    assert round(watts["cpu"], 2) == 20.36
    assert round(watts["ane"], 2) == 0.13
    assert round(watts["dram"], 2) == 4.26


def test_channel_order_moved_between_macos_versions_changes_nothing() -> None:
    data = fixture("ioreport_channels.json")
    before = rails_from_channels((n, u, v) for n, u, v in data["m1ultra_sample_045"])
    after = rails_from_channels((n, u, v) for n, u, v in data["order_moved"])
    assert before == after


def test_unknown_unit_is_left_out_not_guessed() -> None:
    assert rails_from_channels([("GPU Energy", "furlongs", 5.0), ("CPU Energy", "uJ", 2000)]) \
        == {"cpu": 2.0}


# --- the real window ------------------------------------------------------------------------


def test_power_divides_by_the_real_window_not_the_requested_one() -> None:
    # asked for 1000 ms, 1009 ms passed: 12108 mJ / 1.009 s = 12.000 W (÷ 1.000 would be 12.108)
    assert rail_power_w((0, 501009.0), (1_009_000_000, 513117.0)) == pytest.approx(12.0)
    assert rail_power_w((5, 10.0), (5, 20.0)) is None  # no time passed
    assert rail_power_w((0, 20.0), (10**9, 10.0)) is None  # backwards: not energy


def test_one_library_call_per_beat_for_all_rails() -> None:
    _, rows = m4_rows()
    lib = fake_library(rows)
    shared = CumulativeReader(lib.AppleEnergyMonitor())
    assert [shared.value(r) for r in ("cpu", "gpu", "dram")] == [200000.0, 500000.0, 80000.0]
    assert lib.monitor.calls == 1
    assert shared.value("cpu") == 203027.0  # cpu again: the next beat
    assert lib.monitor.calls == 2


# --- a stalled counter is unavailable, never 0 J --------------------------------------------


def stalled_source(busy: float, stamps: list[int]) -> tuple[AppleRailSource, StepClock]:
    rows = [{"cpu_total_mj": 200000, "gpu_mj": 500000 + 12108 * i} for i in range(len(stamps))]
    clock = StepClock(stamps)
    lib = fake_library(rows)
    return AppleRailSource("cpu", CumulativeReader(lib.AppleEnergyMonitor()), lambda: busy,
                           clock), clock


def test_frozen_cpu_counter_under_load_reads_unavailable() -> None:
    stamps = [0, 1_009_000_000, 2_018_000_000, 3_027_000_000]
    source, clock = stalled_source(63.0, stamps)
    got = []
    for i in range(len(stamps)):
        clock.i = i
        got.append(source.read())
    # still for 1.009 s: within the batch cadence; from 2.018 s (>= FROZEN_SPAN_S) while 63 %
    # busy: a stalled channel (macOS 27), not a CPU that used nothing
    assert got[:2] == [(200000.0, None), (200000.0, None)]
    assert got[2:] == [None, None]
    assert "stalled IOReport channel" in (source.last_reason or "")
    assert "63 % busy" in (source.last_reason or "")


def test_frozen_counter_window_has_no_joules_instead_of_zero() -> None:
    stamps = [0, 1_009_000_000, 2_018_000_000, 3_027_000_000]
    rows = [{"cpu_total_mj": 200000, "gpu_mj": 500000 + 12108 * i} for i in range(4)]
    clock = StepClock(stamps)
    rails, _ = discover_apple(fake_library([rows[0], *rows]), cpu_busy=lambda: 63.0,
                              clock=clock)
    reader = EnergyReader(rails, clock=clock)
    for i in range(4):
        clock.i = i
        reader.sample()
    cpu = reader.window("apple:cpu", 0, stamps[3])
    assert cpu.joules is None and cpu.reason == "no reading at a sample in the window"
    gpu = reader.window("apple:gpu", 0, stamps[3])
    assert gpu.joules == pytest.approx(3 * 12.108)  # the GPU's channel kept counting


def test_still_counter_on_an_idle_cpu_is_a_reading() -> None:
    stamps = [0, 3 * 10**9]
    source, clock = stalled_source(1.0, stamps)  # 1 % busy: too idle to judge
    reads = []
    for i in range(2):
        clock.i = i
        reads.append(source.read())
    assert reads == [(200000.0, None), (200000.0, None)]
    assert FROZEN_SPAN_S <= 3.0


# --- joules per token on a fake M4 trace, through the energy layer -------------------------


def test_m4_trace_joules_per_token_matches_the_hand_computation() -> None:
    reader, t = m4_reader()
    # request: sent at t[1] = 1.009 s, first token at t[2] = 2.018 s, last chunk t[4] = 4.036 s;
    # 200 prompt tokens, 60 output tokens.
    gpu = reader.request("apple:gpu", t[1], t[2], t[4], 200, 60)
    # prefill: 513117 − 501009 = 12108 mJ = 12.108 J; decode: 537333 − 513117 = 24216 mJ
    assert gpu.prefill and gpu.prefill.joules == pytest.approx(12.108)
    assert gpu.decode and gpu.decode.joules == pytest.approx(24.216)
    assert gpu.j_per_output_token == pytest.approx(24.216 / 60)  # 0.4036 J/token
    assert gpu.j_per_prompt_token == pytest.approx(12.108 / 200)  # 0.06054 J/token
    cpu = reader.request("apple:cpu", t[1], t[2], t[4], 200, 60)
    # decode: 221189 − 209081 = 12108 mJ → 0.2018 J/token
    assert cpu.j_per_output_token == pytest.approx(0.2018)
    assert not gpu.coarse and not cpu.coarse


def test_m4_trace_above_idle_uses_the_real_window() -> None:
    reader, t = m4_reader()
    info = reader.info("apple:gpu")
    idle = idle_power(info, reader.samples("apple:gpu"), t[0], t[1])
    # 1009 mJ over the 1.009 s that passed: 1.000 W (over a nominal 1.000 s: 1.009 W)
    assert idle == pytest.approx(1.0)
    gpu = reader.request("apple:gpu", t[1], t[2], t[4], 200, 60, idle_power_w=idle)
    # decode above idle: 24.216 J − 1.0 W × 2.018 s = 22.198 J; / 60 = 0.369967 J/token
    assert gpu.decode_above_idle_j == pytest.approx(22.198)
    assert gpu.j_per_output_token_above_idle == pytest.approx(22.198 / 60)


def test_m4_rails_are_reported_each_on_its_own() -> None:
    reader, _ = m4_reader()
    assert reader.groups() == (("apple:cpu", ("apple:cpu",)), ("apple:gpu", ("apple:gpu",)),
                               ("apple:ane", ("apple:ane",)), ("apple:dram", ("apple:dram",)))
    assert reader.covers("apple:dram") == "DRAM of the Apple SoC (IOReport energy model)"


def test_discover_sources_on_a_mac_names_the_rails() -> None:
    _, rows = m4_rows()
    found = discover_sources(platform="darwin", nvml_lib=types.ModuleType("no_pynvml"),
                             sensors_battery=lambda: None, apple_lib=fake_library(rows))
    line = describe_sources(found).line
    assert line.startswith("energy: apple:cpu (Apple SoC CPU clusters (IOReport energy model))")
    assert "apple:gpu (Apple SoC GPU (IOReport energy model))" in line


def test_ioreport_refusal_is_a_reason_not_a_crash() -> None:
    lib = types.ModuleType(LIBRARY)

    def refuse() -> None:
        raise RuntimeError("Failed to create IOReport subscription.")

    lib.AppleEnergyMonitor = refuse  # type: ignore[attr-defined]
    rails, why = discover_apple(lib, cpu_busy=lambda: 0.0)
    assert rails == [] and why == ("Apple: IOReport energy could not be read: RuntimeError: "
                                   "Failed to create IOReport subscription.")
