"""The Apple Silicon probe on Linux: the system commands replaced by their recorded outputs
(tests/fixtures/apple/, each citing its source) and zeus-apple-silicon by a fake replaying a
constructed M4 trace; the figures come out in the vendor-neutral GPU shape."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from llmtop.probes.apple import (
    CHIP,
    IOREG,
    PMSET,
    SYSCTL,
    THERMAL,
    AppleProbe,
    parse_ioreg,
    parse_pmset_therm,
    parse_sysctl,
    parse_thermal_pressure,
    version_lines,
)
from llmtop.probes.gpu import device_dict
from tests.unit.test_apple_energy import fake_library, m4_rows

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "apple"


def recorded(name: str) -> str:
    """A fixture's text less its '# source:' line."""
    lines = (FIXTURES / name).read_text().splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith("# source:"))


def replay(outputs: dict[tuple[str, ...], str | None]):  # type: ignore[no-untyped-def]
    def run(argv: Sequence[str]) -> tuple[str | None, str | None]:
        out = outputs.get(tuple(argv))
        return (out, None) if out is not None else (None, f"{argv[0]} is not on this machine")
    return run


MAC = {IOREG: recorded("ioreg_agx_m1pro.plist"), THERMAL: recorded("notifyutil_thermal.txt"),
       PMSET: recorded("pmset_therm_m1pro.txt"), SYSCTL: recorded("sysctl_loaded.txt"),
       CHIP: recorded("sysctl_chip_m1max.txt")}


def test_recorded_ioreg_plist_gives_gpu_busy_and_memory() -> None:
    reading, why = parse_ioreg((FIXTURES / "ioreg_agx_m1pro.plist").read_bytes())
    assert why is None and reading is not None
    # recorded on an M1 Pro: "Device Utilization %"=2, "In use system memory"=340983808
    assert reading.busy_percent == 2.0
    assert reading.renderer_percent == 2.0 and reading.tiler_percent == 2.0
    assert reading.in_use_bytes == 340983808 and reading.alloc_bytes == 1214005248


def test_ioreg_busy_past_100_is_set_aside_with_its_reason() -> None:
    plist = recorded("ioreg_agx_m1pro.plist").replace(
        "<key>Device Utilization %</key>\n\t\t\t<integer>2</integer>",
        "<key>Device Utilization %</key>\n\t\t\t<integer>101</integer>")
    reading, _ = parse_ioreg(plist)
    assert reading is not None and reading.busy_percent is None
    assert reading.notes == ("Device Utilization % = 101: outside 0-100, set aside",)


def test_ioreg_garbage_or_an_intel_mac_is_a_reason() -> None:
    assert parse_ioreg(b"+-o AGXAcceleratorG13X  <class ...>")[0] is None
    empty = (b'<?xml version="1.0"?><plist version="1.0"><array/></plist>')
    assert parse_ioreg(empty) == (None, "ioreg: no AGXAccelerator entry (not Apple Silicon's GPU)")


def test_thermal_pressure_levels_in_nsprocessinfo_words() -> None:
    assert parse_thermal_pressure(recorded("notifyutil_thermal.txt")) == ("serious", 2, None)
    assert parse_thermal_pressure("com.apple.system.thermalpressurelevel 0") == (
        "nominal", 0, None)
    assert parse_thermal_pressure("com.apple.system.thermalpressurelevel 1")[0] == "fair"
    assert parse_thermal_pressure("com.apple.system.thermalpressurelevel 3")[0] == "critical"
    state, level, why = parse_thermal_pressure("com.apple.system.thermalpressurelevel 9")
    assert (state, level) == (None, 9) and "unknown thermal pressure level 9" in (why or "")


def test_pmset_on_apple_silicon_records_no_speed_limit() -> None:
    got = parse_pmset_therm(recorded("pmset_therm_m1pro.txt"))
    assert got == {"speed_limit": None, "scheduler_limit": None, "available_cpus": None,
                   "warning_recorded": False}


def test_pmset_speed_limits_where_recorded() -> None:
    assert parse_pmset_therm(recorded("pmset_therm_intel.txt"))["speed_limit"] == 100
    throttled = parse_pmset_therm(recorded("pmset_therm_throttled.txt"))
    assert throttled["speed_limit"] == 28 and throttled["scheduler_limit"] == 40
    assert throttled["available_cpus"] == 8 and throttled["warning_recorded"] is True


def test_sysctl_swap_and_memory_pressure() -> None:
    got = parse_sysctl(recorded("sysctl_loaded.txt"))
    # 13312.00M = 13312 × 2^20 = 13958643712 B; 11625.69 × 1048576 = 12190419517.4 → 12190419517
    assert got == {"swap_total": 13958643712, "swap_used": 12190419517,
                   "memory_free_percent": 41}
    assert parse_sysctl("kern.memorystatus_level: 250\n")["memory_free_percent"] is None


def probe_with_m4() -> tuple[AppleProbe, list[int]]:
    stamps, rows = m4_rows()
    clock_at = {"i": 0}
    probe = AppleProbe(lib=fake_library(rows), run=replay(MAC),
                       clock=lambda: stamps[clock_at["i"]])
    probe.clock_at = clock_at  # type: ignore[attr-defined]
    return probe, stamps


def test_probe_gives_the_vendor_neutral_gpu_shape() -> None:
    probe, _ = probe_with_m4()
    probe.sample()
    probe.clock_at["i"] = 2  # type: ignore[attr-defined]
    sample = probe.sample()
    assert sample.available and sample.source == "apple"
    d = device_dict(sample.devices[0])
    assert d["vendor"] == "Apple" and d["busy_percent"] == 2.0
    assert d["vram_used_bytes"] == 340983808
    # the probe's two reads took rows 0 and 1: 501009 − 500000 = 1009 mJ, over the 2.018 s
    # that passed between them (stamps[2] − stamps[0]) = 0.500 W
    assert d["power_w"] == pytest.approx(1009 / 1000 / 2.018, abs=1e-3)
    assert d["power_from"] == "IOReport GPU Energy over 2.018 s"
    assert "thermal pressure: serious (level 2)" in d["notes"]
    assert "memory free (kernel memorystatus level): 41 %" in d["notes"]
    assert json.loads(json.dumps(d)) == d


def test_first_sample_has_no_power_rather_than_zero() -> None:
    probe, _ = probe_with_m4()
    probe.sample()
    assert probe.last is not None
    assert probe.last.power_w == {"cpu": None, "gpu": None, "ane": None, "dram": None}
    assert probe.last.sources["thermal_state"].startswith("notifyutil")


def test_figures_not_read_are_said_not_zeroed() -> None:
    probe, _ = probe_with_m4()
    device = probe.sample().devices[0]
    assert device.clock_graphics_mhz is None and device.temperature_c is None
    assert any(n.startswith("GPU frequency: IOReport's GPU Stats") for n in device.notes)
    assert any(n.startswith("memory bandwidth: the DCS counters") for n in device.notes)


def test_no_commands_and_no_library_is_reasons_not_a_crash() -> None:
    probe = AppleProbe(lib=None, run=replay({}))
    sample = probe.sample()
    device = sample.devices[0]
    assert device.util_percent is None
    assert device.util_reason == "ioreg gave no Device Utilization %"
    assert any("ioreg is not on this machine" in n for n in device.notes)
    assert any(n.startswith("power: Apple: IOReport energy is read on macOS") for n in
               device.notes)


def test_version_lines_print_every_source_raw() -> None:
    probe, _ = probe_with_m4()
    lines = version_lines(probe)
    names = [line.split()[1] for line in lines]
    assert names == ["ioreg", "thermal", "pmset", "sysctl", "chip", "zeus_apple_silicon"]
    assert "com.apple.system.thermalpressurelevel 2" in lines[1]
    assert lines[4].split(None, 2)[2] == ("machdep.cpu.brand_string: Apple M1 Max | hw.model: "
                                          "MacBookPro18,2")
    assert "'cpu_total_mj': 200000" in lines[5]


def test_the_panels_verdict_says_thermal_pressure() -> None:
    # the recorded level 2 ("serious") makes the sample NOISY with a FAIL; fair is a WARN;
    # nominal, or a GPU that reads no thermal state (NVIDIA, AMD), adds nothing
    from llmtop.probes.verdict import Level, Verdict, evaluate
    from tests.tui.fakes import machine_sample

    probe, _ = probe_with_m4()
    gpu = probe.sample()
    base = machine_sample(0, 5.0, (), Verdict.of([]), 1.0)
    assert base.system is not None and base.processes is not None
    found = evaluate(base.system, base.processes, gpu=gpu)
    thermal = [f for f in found.findings if f.code == "thermal-pressure"]
    assert [(f.level, f.message) for f in thermal] == [
        (Level.FAIL, "thermal pressure serious: clocks cut")]
    assert not found.quiet
    fair = AppleProbe(lib=None, run=replay({**MAC, THERMAL: "com.apple.system."
                                            "thermalpressurelevel 1"})).sample()
    assert [f.level for f in evaluate(base.system, base.processes, gpu=fair).findings
            if f.code == "thermal-pressure"] == [Level.WARN]
    nominal = AppleProbe(lib=None, run=replay({**MAC, THERMAL: "com.apple.system."
                                               "thermalpressurelevel 0"})).sample()
    assert all(f.code != "thermal-pressure" for f in
               evaluate(base.system, base.processes, gpu=nominal).findings)
