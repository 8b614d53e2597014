"""Energy sources and the per-request arithmetic (issue 26) over fake powercap / power_supply
trees and a fake NVML: every expected joule is computed by hand in the comment beside it.

Stamps are made by the tests (a settable clock), never slept for; counters are written by the
tests at those stamps.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from llmtop.probes.energy import (
    NA_PREFIX,
    EnergyReader,
    EnergySample,
    Kind,
    Role,
    SourceInfo,
    combine,
    describe_sources,
    discover_sources,
    idle_power,
    observed_update_period,
    request_energy,
    run_energy,
    version_line,
    window_energy,
)
from llmtop.probes.energy.battery import discover_batteries, psutil_battery
from llmtop.probes.energy.nvml import discover_nvml
from llmtop.probes.energy.rapl import discover_rapl, read_text
from llmtop.probes.gpu import GpuProbe

S = 1_000_000_000  # ns per second
MAX_RANGE = 262143328850  # a real package's max_energy_range_uj


class Clock:
    """A perf_counter_ns stand-in the test sets."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def zone(root: Path, directory: str, name: str, energy_uj: int, max_uj: int = MAX_RANGE) -> Path:
    path = root / directory
    path.mkdir(parents=True)
    (path / "name").write_text(name + "\n")
    (path / "energy_uj").write_text(f"{energy_uj}\n")
    (path / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return path


def rapl_tree(root: Path) -> None:
    (root / "intel-rapl").mkdir(parents=True)  # the control type's own directory: not a zone
    zone(root, "intel-rapl:0", "package-0", 1000)
    zone(root, "intel-rapl:0:0", "core", 500)
    zone(root, "intel-rapl:0:1", "dram", 200)
    zone(root, "intel-rapl:1", "psys", 3000)
    zone(root, "intel-rapl-mmio:0", "package-0", 1001)  # the same package through MMIO


def no_gpu() -> Any:
    return FakeNvml(count=0)


# --- RAPL ---------------------------------------------------------------------------------


def test_rapl_zones_roles_and_double_counting(tmp_path: Path) -> None:
    rapl_tree(tmp_path)
    infos = {s.info.name: s.info for s in discover_rapl(tmp_path)}
    assert sorted(infos) == ["rapl:package-0", "rapl:package-0/core", "rapl:package-0/dram",
                             "rapl:package-0@intel-rapl-mmio:0", "rapl:psys"]
    pkg = infos["rapl:package-0"]
    assert (pkg.role, pkg.kind, pkg.unit, pkg.covers) == (
        Role.PACKAGE, Kind.COUNTER, "uJ", "CPU package 0")
    assert pkg.readable and pkg.reason is None and pkg.wrap_range == MAX_RANGE
    assert pkg.resolution_j == 1e-6 and pkg.update_period_s == 0.001
    assert infos["rapl:package-0/dram"].role is Role.SUBDOMAIN
    assert infos["rapl:package-0/dram"].covers == "DRAM of package-0"
    assert infos["rapl:package-0/core"].covers == "CPU cores of package-0"
    assert infos["rapl:psys"].role is Role.PLATFORM
    assert infos["rapl:package-0@intel-rapl-mmio:0"].duplicate_of == "rapl:package-0"
    # only the MSR package adds into the CPU total: subdomains, psys and the mirror do not
    assert [n for n, i in infos.items() if i.summed] == ["rapl:package-0"]


def test_an_unreadable_msr_zone_leaves_its_mmio_twin_counted(tmp_path: Path) -> None:
    rapl_tree(tmp_path)

    def msr_root_only(path: Path) -> str:
        if path.parent.name == "intel-rapl:0" and path.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return read_text(path)

    infos = {s.info.name: s.info for s in discover_rapl(tmp_path, msr_root_only)}
    assert not infos["rapl:package-0"].readable
    mmio = infos["rapl:package-0@intel-rapl-mmio:0"]
    assert mmio.readable and mmio.duplicate_of is None and mmio.summed


def test_rapl_mirrored_dies_are_not_summed_twice(tmp_path: Path) -> None:
    zone(tmp_path, "intel-rapl:0", "package-0-die-0", 77_000)
    zone(tmp_path, "intel-rapl:1", "package-0-die-1", 77_000)  # the socket's counter again
    zone(tmp_path, "intel-rapl:2", "package-1-die-0", 91_000)  # another socket: its own
    infos = [s.info for s in discover_rapl(tmp_path)]
    assert [(i.name, i.duplicate_of, i.summed) for i in infos] == [
        ("rapl:package-0-die-0", None, True),
        ("rapl:package-0-die-1", "rapl:package-0-die-0", False),
        ("rapl:package-1-die-0", None, True),
    ]
    assert infos[1].covers == "CPU package 0 die 1"


def test_rapl_counter_wrap_gives_exact_joules(tmp_path: Path) -> None:
    path = zone(tmp_path, "intel-rapl:0", "package-0", 262143000000)
    clock = Clock()
    reader = EnergyReader(discover_rapl(tmp_path), clock=clock)
    reader.sample()  # t = 0: 262143000000 µJ
    (path / "energy_uj").write_text("500000\n")  # wrapped past max_energy_range_uj
    clock.now = 1 * S
    reader.sample()
    # (262143328850 − 262143000000) + 500000 = 328850 + 500000 = 828850 µJ = 0.82885 J
    w = reader.window("rapl:package-0", 0, S)
    assert w.joules == pytest.approx(0.82885, rel=1e-12)
    assert w.mean_power_w == pytest.approx(0.82885, rel=1e-12)
    assert not w.coarse and w.samples_inside == 2
    # the middle half of the second, by linear interpolation: 828850 / 2 = 414425 µJ
    assert reader.window("rapl:package-0", S // 4, 3 * S // 4).joules == pytest.approx(
        0.414425, rel=1e-12)


def test_rapl_root_only_counter_says_what_the_user_can_run(tmp_path: Path) -> None:
    rapl_tree(tmp_path)

    def root_only(path: Path) -> str:  # tests run as root, where chmod 000 stops nothing
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return read_text(path)

    found = discover_sources(tmp_path, tmp_path / "none", nvml_lib=no_gpu(), platform="linux",
                             read=root_only)
    pkg = next(i for i in found.infos if i.name == "rapl:package-0")
    assert not pkg.readable and pkg.reason is not None
    assert "CVE-2020-8694" in pkg.reason
    assert f"sudo chmod a+r {tmp_path}/intel-rapl:*/energy_uj" in pkg.reason
    assert 'SUBSYSTEM=="powercap"' in pkg.reason and "never asks for root" in pkg.reason
    assert found.readable == ()
    line = describe_sources(found).line
    assert line.startswith(NA_PREFIX + " (rapl:package-0, rapl:package-0/core, ")
    assert line.count("CVE-2020-8694") == 1  # the advice once, after every zone it covers
    assert "NVML: no NVIDIA GPU found" in line
    assert EnergyReader(found.sources).infos == ()  # nothing unreadable is sampled


def test_fifteen_watts_gives_fifteen_joules_per_second_and_hand_computed_j_per_token(
    tmp_path: Path,
) -> None:
    """The issue's check: a counter advancing 5 W while idle (0–1 s), then 15 W × elapsed.

    Request (scripted stamps): send 1.03 s, first token 1.28 s, last chunk 3.28 s;
    50 prompt tokens, 100 output tokens. Samples every 0.01 s from 0 to 4 s (a runner
    samples at the request's edges: the windows are not coarse).
      total   = 15 W × 2.25 s = 33.75 J;  prefill = 15 × 0.25 = 3.75 J;  decode = 15 × 2 = 30 J
      J/output token = 30 / 100 = 0.3;     J/prompt token = 3.75 / 50 = 0.075
      idle power over [0, 1 s] = 5 J / 1 s = 5 W
      above idle: total 33.75 − 5 × 2.25 = 22.5 J; prefill 3.75 − 5 × 0.25 = 2.5 J;
                  decode 30 − 5 × 2 = 20 J → 0.2 J/output token, 2.5 / 50 = 0.05 J/prompt token
    """
    path = zone(tmp_path, "intel-rapl:0", "package-0", 0)
    zone(tmp_path, "intel-rapl:0:0", "dram", 0)
    clock = Clock()
    found = discover_sources(tmp_path, tmp_path / "ps", nvml_lib=no_gpu(), platform="linux")
    reader = EnergyReader(found.sources, clock=clock)
    for k in range(401):
        t_ns = k * S // 100
        # µJ = W × ns / 1000 (1 W = 1 µJ/µs)
        uj = 5 * t_ns // 1000 if t_ns <= S else 5 * S // 1000 + 15 * (t_ns - S) // 1000
        (path / "energy_uj").write_text(f"{uj}\n")
        clock.now = t_ns
        reader.sample()
    name = "rapl:package-0"
    send, first, last = 1_030_000_000, 1_280_000_000, 3_280_000_000
    run = reader.window(name, send, last)
    assert run.mean_power_w == pytest.approx(15.0, rel=0.01)
    idle = idle_power(reader.info(name), reader.samples(name), 0, S)
    assert idle == pytest.approx(5.0, rel=1e-9)
    r = reader.request(name, send, first, last, 50, 100, idle_power_w=idle)
    assert r.total.joules == pytest.approx(33.75, rel=1e-9)
    assert r.prefill is not None and r.prefill.joules == pytest.approx(3.75, rel=1e-9)
    assert r.decode is not None and r.decode.joules == pytest.approx(30.0, rel=1e-9)
    assert r.j_per_output_token == pytest.approx(0.3, rel=1e-9)
    assert r.j_per_prompt_token == pytest.approx(0.075, rel=1e-9)
    assert r.total_above_idle_j == pytest.approx(22.5, rel=1e-9)
    assert r.j_per_output_token_above_idle == pytest.approx(0.2, rel=1e-9)
    assert r.j_per_prompt_token_above_idle == pytest.approx(0.05, rel=1e-9)
    assert not r.coarse
    cpu = reader.cpu_window(send, last)  # one package: the CPU total is that package
    assert cpu is not None and cpu.joules == pytest.approx(33.75, rel=1e-9)
    assert reader.window("rapl:package-0/dram", send, last).joules == 0
    d = json.loads(json.dumps(r.to_dict()))
    assert d["energy_j"] == pytest.approx(33.75) and d["output_j_per_token"] == pytest.approx(0.3)
    assert d["windows"]["decode"]["mean_power_w"] == pytest.approx(15.0)


def test_window_shorter_than_the_sampling_is_too_coarse_for_one_request() -> None:
    info = SourceInfo("rapl:package-0", Kind.COUNTER, Role.PACKAGE, "uJ", 1e-6, "CPU", True,
                      resolution_j=1e-6, update_period_s=0.001)
    samples = [EnergySample(0, 0), EnergySample(S, 10_000_000)]  # 10 J over 1 s
    w = window_energy(info, samples, S // 10, S // 5)  # 0.1 s inside one 1 s interval
    # interpolated: 10 J × 0.1 = 1 J, but no sample lies inside the window
    assert w.joules == pytest.approx(1.0)
    assert w.coarse and w.samples_inside == 0
    assert w.reason is not None
    assert w.reason.startswith("too coarse for one request: aggregate over the run")
    # 0.005 s is also under 10 update periods of 1 ms
    short = window_energy(info, samples, 0, 5_000_000)
    assert short.coarse and short.reason is not None and "update periods" in short.reason
    assert not window_energy(info, samples, 0, S).coarse


def test_counter_reset_missing_reading_and_bad_windows() -> None:
    info = SourceInfo("nvml:gpu0", Kind.COUNTER, Role.GPU, "mJ", 1e-3, "GPU 0 board", True)
    back = [EnergySample(0, 5000), EnergySample(S, 10)]  # no wrap range: a reset
    assert window_energy(info, back, 0, S).joules is None
    gap = [EnergySample(0, 0), EnergySample(S, None), EnergySample(2 * S, 10)]
    w = window_energy(info, gap, 0, 2 * S)
    assert w.joules is None and w.reason == "no reading at a sample in the window"
    outside = window_energy(info, gap[:1], 0, S)
    assert outside.joules is None and outside.reason is not None and "not inside" in outside.reason
    with pytest.raises(ValueError, match="ends before"):
        window_energy(info, back, S, 0)
    with pytest.raises(ValueError, match="time order"):
        window_energy(info, [EnergySample(S, 0), EnergySample(0, 1)], 0, S)
    with pytest.raises(ValueError, match="send"):
        request_energy(info, back, 2, 1, 3, 1, 1)


def test_a_failed_read_is_a_gap_not_a_crash(tmp_path: Path) -> None:
    path = zone(tmp_path, "intel-rapl:0", "package-0", 0)
    clock = Clock()
    reader = EnergyReader(discover_rapl(tmp_path), clock=clock)
    reader.sample()
    (path / "energy_uj").write_text("garbage\n")
    clock.now = S
    assert reader.sample()["rapl:package-0"].value is None
    assert reader.window("rapl:package-0", 0, S).joules is None


# --- battery ------------------------------------------------------------------------------


def supply(root: Path, name: str, **files: object) -> Path:
    path = root / name
    path.mkdir(parents=True)
    for key, value in files.items():
        (path / key).write_text(f"{value}\n")
    return path


def test_battery_energy_now_only_while_discharging(tmp_path: Path) -> None:
    bat = supply(tmp_path, "BAT0", type="Battery", status="Discharging", energy_now=50_000_000,
                 power_now=3_600_000)
    supply(tmp_path, "AC", type="Mains", online=0)
    supply(tmp_path, "hidpp_battery_0", type="Battery", scope="Device", status="Discharging",
           energy_now=1)  # a mouse's battery: not the machine's
    sources = discover_batteries(tmp_path)
    assert [s.info.name for s in sources] == ["battery:BAT0"]
    info = sources[0].info
    assert (info.kind, info.unit, info.coarse, info.readable) == (Kind.LEVEL, "uWh", True, True)
    clock = Clock()
    reader = EnergyReader(sources, clock=clock)
    reader.sample()
    (bat / "energy_now").write_text("49990000\n")
    clock.now = 10 * S
    reader.sample()
    # (50,000,000 − 49,990,000) µWh = 10,000 µWh × 3.6e-3 J/µWh = 36 J over 10 s = 3.6 W
    w = reader.window("battery:BAT0", 0, 10 * S)
    assert w.joules == pytest.approx(36.0, rel=1e-12)
    assert w.mean_power_w == pytest.approx(3.6, rel=1e-12)
    assert w.coarse  # a gauge with no known update period: aggregate over the run
    (bat / "status").write_text("Charging\n")
    clock.now = 20 * S
    assert reader.sample()["battery:BAT0"].value is None  # on mains: no reading
    assert reader.window("battery:BAT0", 0, 20 * S).joules is None


def test_battery_charge_times_voltage_is_integrated_over_charge(tmp_path: Path) -> None:
    bat = supply(tmp_path, "BAT1", type="Battery", status="Discharging", charge_now=3_000_000,
                 voltage_now=12_000_000)
    clock = Clock()
    sources = discover_batteries(tmp_path)
    assert sources[0].info.unit == "uAh"
    reader = EnergyReader(sources, clock=clock)
    reader.sample()
    (bat / "charge_now").write_text("2999000\n")
    (bat / "voltage_now").write_text("11800000\n")
    clock.now = 60 * S
    reader.sample()
    # 1000 µAh × 3.6e-3 C/µAh = 3.6 C; × mean voltage (12.0 + 11.8) / 2 = 11.9 V → 42.84 J
    assert reader.window("battery:BAT1", 0, 60 * S).joules == pytest.approx(42.84, rel=1e-12)


def test_battery_gauge_update_period_is_measured_from_the_samples() -> None:
    info = SourceInfo("battery:BAT0", Kind.LEVEL, Role.BATTERY, "uWh", 3.6e-3, "machine", True,
                      coarse=True)
    # sampled each second, the gauge moves every 5 s by 1000 µWh (= 3.6 J)
    samples = [EnergySample(k * S, 100_000 - 1000 * (k // 5)) for k in range(31)]
    assert observed_update_period(samples) == pytest.approx(5.0)
    w = window_energy(info, samples, 0, 30 * S)
    # 6 steps × 1000 µWh × 3.6e-3 = 21.6 J; 30 s < 10 × 5 s: too coarse for one request
    assert w.joules == pytest.approx(21.6)
    assert w.coarse and w.reason is not None and "update periods of 5 s" in w.reason
    run = run_energy(info, samples, 0, 30 * S, prompt_tokens=300, output_tokens=600,
                     requests=3, idle_power_w=0.2)
    # all-in 21.6 J / 600 tokens = 0.036 J/token; above idle 21.6 − 0.2 × 30 = 15.6 J → 0.026
    assert run.j_per_output_token == pytest.approx(0.036)
    assert run.above_idle_j == pytest.approx(15.6)
    assert run.j_per_output_token_above_idle == pytest.approx(0.026)
    assert json.loads(json.dumps(run.to_dict()))["coarse"] is True


def test_battery_off_linux_is_percent_only() -> None:
    present = psutil_battery(lambda: SimpleNamespace(percent=80, power_plugged=False))
    assert not present.readable and present.reason is not None and "% only" in present.reason
    assert psutil_battery(lambda: None).reason == "battery: none found"


# --- NVML ---------------------------------------------------------------------------------


class NVMLError(Exception):
    pass


class FakeNvml:
    """The pynvml functions the energy sources and the GPU probe call, for `count` GPUs."""

    NVMLError = NVMLError

    def __init__(self, count: int = 1, counter: bool = True) -> None:
        self.count = count
        self.counter = counter
        self.init_calls = 0
        self.energy_mj = 1_000_000
        self.power_mw = 100_000

    def nvmlInit(self) -> None:
        self.init_calls += 1

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"h{i}"

    def nvmlDeviceGetTotalEnergyConsumption(self, h: str) -> int:
        if not self.counter:
            raise NVMLError("Not Supported")
        return self.energy_mj

    def nvmlDeviceGetPowerUsage(self, h: str) -> int:
        return self.power_mw

    def __getattr__(self, name: str) -> Any:  # the GPU probe's other queries: not supported
        if name.startswith("nvml"):
            def unsupported(*args: object) -> None:
                raise NVMLError("Not Supported")
            return unsupported
        raise AttributeError(name)


def test_nvml_energy_counter() -> None:
    lib = FakeNvml()
    sources, why = discover_nvml(lib)
    assert why is None
    info = sources[0].info
    assert (info.name, info.kind, info.unit, info.covers) == (
        "nvml:gpu0", Kind.COUNTER, "mJ", "GPU 0 board")
    clock = Clock()
    reader = EnergyReader(sources, clock=clock)
    reader.sample()
    lib.energy_mj, clock.now = 1_250_000, S
    reader.sample()
    # 1,250,000 − 1,000,000 = 250,000 mJ = 250 J over 1 s
    assert reader.window("nvml:gpu0", 0, S).joules == pytest.approx(250.0, rel=1e-12)


def test_nvml_board_power_integrated_by_trapezoids() -> None:
    lib = FakeNvml(counter=False)
    sources, _ = discover_nvml(lib)
    info = sources[0].info
    assert info.kind is Kind.POWER and info.integrated and "integrated" in info.covers
    clock = Clock()
    reader = EnergyReader(sources, clock=clock)
    reader.sample()  # 100 W at 0 s
    lib.power_mw, clock.now = 200_000, 2 * S
    reader.sample()  # 200 W at 2 s
    # (100 + 200) / 2 W × 2 s = 300 J
    assert reader.window("nvml:gpu0", 0, 2 * S).joules == pytest.approx(300.0, rel=1e-12)
    # P(t) = 100 + 50 t W; ∫ from 0.5 to 1.5 s = 100 × 1 + 25 × (1.5² − 0.5²) = 100 + 50 = 150 J
    assert reader.window("nvml:gpu0", S // 2, 3 * S // 2).joules == pytest.approx(150.0)
    assert "integrated" in describe_sources(
        discover_sources(Path("/nonexistent"), Path("/nonexistent"), nvml_lib=lib,
                         platform="linux")).line


def test_nvml_is_initialised_once_with_the_gpu_probe() -> None:
    lib = FakeNvml()
    GpuProbe(lib).sample()
    discover_nvml(lib)
    assert lib.init_calls == 1


# --- the summaries ------------------------------------------------------------------------


def test_nothing_readable_says_na_with_every_reason(tmp_path: Path) -> None:
    (tmp_path / "power_supply").mkdir()
    found = discover_sources(tmp_path / "powercap", tmp_path / "power_supply",
                             nvml_lib=no_gpu(), platform="linux")
    assert describe_sources(found).line == (
        "energy: n/a — no readable source ("
        f"RAPL: no {tmp_path}/powercap (not Linux, or no powercap driver: a VM usually has "
        "none); NVML: no NVIDIA GPU found; "
        f"battery: none under {tmp_path}/power_supply)"
    )
    assert version_line(found).startswith("energy sources: readable: none; not readable: RAPL:")
    summary = json.loads(json.dumps(describe_sources(found).to_dict()))
    assert [s["name"] for s in summary["sources"]] == ["rapl", "nvml", "battery"]


def test_readable_sources_are_named_in_one_line(tmp_path: Path) -> None:
    rapl_tree(tmp_path / "powercap")
    found = discover_sources(tmp_path / "powercap", tmp_path / "ps", nvml_lib=no_gpu(),
                             platform="linux")
    line = describe_sources(found).line
    assert line.startswith("energy: rapl:package-0 (CPU package 0), rapl:package-0/core (")
    assert "mirrors rapl:package-0, not summed" in line
    assert version_line(found).startswith(
        "energy sources: readable: rapl:package-0, rapl:package-0/core, rapl:package-0/dram, "
        "rapl:psys, rapl:package-0@intel-rapl-mmio:0; not readable: NVML: no NVIDIA GPU found")


def test_macos_off_apple_silicon_says_why() -> None:
    # darwin on this x86-64/arm Linux host's machine: not Apple Silicon, zeus never imported
    found = discover_sources(nvml_lib=no_gpu(), platform="darwin", sensors_battery=lambda: None)
    line = describe_sources(found).line
    assert line.startswith(NA_PREFIX)
    assert "Apple: IOReport energy is read on macOS on Apple Silicon only" in line
    assert "RAPL: read through Linux powercap only" in line


def test_records_are_json_ready_with_units_in_names(tmp_path: Path) -> None:
    rapl_tree(tmp_path)
    info = discover_rapl(tmp_path)[0].info
    d = json.loads(json.dumps(info.to_dict()))
    assert d["kind"] == "counter" and d["role"] == "package" and d["resolution_j"] == 1e-6
    w = window_energy(info, [EnergySample(0, 0), EnergySample(S, 2_000_000)], 0, S)
    assert json.loads(json.dumps(w.to_dict())) == {
        "source": "rapl:package-0", "t0_ns": 0, "t1_ns": S, "duration_s": 1.0,
        "energy_j": 2.0, "mean_power_w": 2.0, "coarse": False, "reason": None,
        "samples_inside": 2, "integrated": False,
    }
    assert EnergySample(5, 1.5, 3.7).to_dict("uAh") == {"t_ns": 5, "value_uah": 1.5,
                                                        "voltage_v": 3.7}
    clock = Clock()
    clock.now = 7
    reader = EnergyReader(discover_rapl(tmp_path), clock=clock)
    rec = json.loads(json.dumps(reader.record(reader.sample())))
    assert rec["rapl:package-0"] == {"t_ns": 7, "value_uj": 1000, "voltage_v": None}
    assert rec["rapl:psys"] == {"t_ns": 7, "value_uj": 3000, "voltage_v": None}


def test_two_sockets_sum_into_the_cpu_total(tmp_path: Path) -> None:
    p0 = zone(tmp_path, "intel-rapl:0", "package-0", 0)
    p1 = zone(tmp_path, "intel-rapl:1", "package-1", 0)
    zone(tmp_path, "intel-rapl:2", "psys", 0)
    clock = Clock()
    reader = EnergyReader(discover_rapl(tmp_path), clock=clock)
    reader.sample()
    (p0 / "energy_uj").write_text("40000000\n")  # 40 J
    (p1 / "energy_uj").write_text("25000000\n")  # 25 J
    clock.now = 2 * S
    reader.sample()
    cpu = reader.cpu_window(0, 2 * S)
    # 40 J + 25 J = 65 J over 2 s = 32.5 W; psys (0 J here) is never added
    assert cpu is not None and cpu.source == "rapl:cpu"
    assert cpu.joules == pytest.approx(65.0) and cpu.mean_power_w == pytest.approx(32.5)
    with pytest.raises(ValueError, match="differ"):
        combine("x", [reader.window("rapl:package-0", 0, S), reader.window("rapl:psys", 0, 2 * S)])


def test_battery_current_times_voltage_is_integrated_power(tmp_path: Path) -> None:
    bat = supply(tmp_path, "BAT0", type="Battery", status="Discharging", current_now=1_000_000,
                 voltage_now=12_000_000)
    sources = discover_batteries(tmp_path)
    assert sources[0].info.kind is Kind.POWER and sources[0].info.integrated
    clock = Clock()
    reader = EnergyReader(sources, clock=clock)
    reader.sample()  # 1 A × 12 V = 12 W
    (bat / "current_now").write_text("500000\n")
    clock.now = 10 * S
    reader.sample()  # 0.5 A × 12 V = 6 W
    # trapezoid: (12 + 6) / 2 W × 10 s = 90 J
    assert reader.window("battery:BAT0", 0, 10 * S).joules == pytest.approx(90.0)


def test_battery_with_an_unseen_update_period() -> None:
    info = SourceInfo("battery:BAT0", Kind.LEVEL, Role.BATTERY, "uWh", 3.6e-3, "machine", True,
                      coarse=True)
    # every 1 s sample changed by 100 µWh (0.36 J): the gauge updates at least once a second
    moving = [EnergySample(k * S, 1_000_000 - 100 * k) for k in range(101)]
    assert observed_update_period(moving) is None
    long = window_energy(info, moving, 0, 100 * S)
    # 100 × 100 µWh × 3.6e-3 = 36 J; 100 s ≥ 10 spacings of 1 s: not coarse
    assert long.joules == pytest.approx(36.0) and not long.coarse
    assert window_energy(info, moving, 0, 5 * S).coarse  # 5 s < 10 spacings
    # one step in 60 s: the period is longer than the series shows
    still = [EnergySample(k * S, 1_000_000 - (1000 if k >= 30 else 0)) for k in range(61)]
    w = window_energy(info, still, 0, 60 * S)
    assert w.joules == pytest.approx(3.6)  # 1000 µWh × 3.6e-3 J/µWh
    assert w.coarse and w.reason is not None and "fewer than twice" in w.reason


class NoDriverNvml(FakeNvml):
    """pynvml installed on a machine without NVIDIA's driver: nvmlInit fails as pynvml does
    there (NVML_ERROR_LIBRARY_NOT_FOUND)."""

    def nvmlInit(self) -> None:
        self.init_calls += 1
        raise NVMLError("NVML Shared Library Not Found")


def test_no_nvidia_driver_is_said_as_the_machine_state_not_the_library_error() -> None:
    # issue 32, finding O: the raw "NVML unavailable: NVML Shared Library Not Found" was
    # every report's and compare's energy and GPU line on a machine without an NVIDIA GPU
    (info,) = discover_sources(Path("/nonexistent"), Path("/nonexistent"),
                               nvml_lib=NoDriverNvml(), platform="linux").absent[1:2]
    assert info.name == "nvml" and not info.readable
    assert info.reason == "NVIDIA GPUs: no NVIDIA driver (NVML's library is not on this machine)"
