"""AMD and Intel GPUs read from the kernel's files: fake /sys/class/drm trees with the files,
values and units the kernel documents (amdgpu: gpu_busy_percent in %, mem_info_vram_* in
bytes, pp_dpm_* levels with the current one marked '*'; hwmon: power in µW, energy in µJ,
temperature in m°C; i915: gt_cur_freq_mhz), read by the readers and by the real CLI with the
tree mounted over /sys/class in a private mount namespace."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmtop.probes.gpu import GpuProbe, device_dict
from llmtop.probes.gpu_sysfs import (
    ASLEEP,
    INTEL_BUSY_REASON,
    CardReader,
    current_clock,
    find_cards,
)
from llmtop.probes.preflight import aggregate
from llmtop.probes.sampler import ProbeSample
from llmtop.probes.verdict import Verdict

GIB = 1 << 30


def _write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def amd_card(root: Path, n: int = 1, **over: str) -> Path:
    """An RX 7900 XTX as amdgpu shows it: 37 % busy, 4 GiB of 24 GiB VRAM used, 85 W
    average, 52 °C, core at level 1 (1900 MHz), memory at level 2 (1249 MHz)."""
    dev = root / f"card{n}" / "device"
    files = {
        "vendor": "0x1002\n", "device": "0x744c\n",
        "uevent": "DRIVER=amdgpu\nPCI_CLASS=30000\nPCI_ID=1002:744C\n",
        "gpu_busy_percent": "37\n", "mem_info_vram_used": f"{4 * GIB}\n",
        "mem_info_vram_total": f"{24 * GIB}\n",
        "pp_dpm_sclk": "0: 500Mhz \n1: 1900Mhz *\n2: 2500Mhz \n",
        "pp_dpm_mclk": "0: 96Mhz \n1: 456Mhz \n2: 1249Mhz *\n",
        "power/runtime_status": "active\n",
        "hwmon/hwmon3/name": "amdgpu\n", "hwmon/hwmon3/power1_average": "85000000\n",
        "hwmon/hwmon3/temp1_input": "52000\n",
    }
    files.update({k.replace("__", "/"): v for k, v in over.items()})
    _write(dev, files)
    (root / f"card{n}-DP-1").mkdir()  # a connector, not a GPU
    return dev


def intel_card(root: Path, n: int = 0, energy_uj: int = 123_456_789_012) -> Path:
    """An Arc A770 under i915: hwmon energy1_input (µJ), gt_cur_freq_mhz 2100."""
    dev = root / f"card{n}" / "device"
    _write(dev, {"vendor": "0x8086\n", "device": "0x56a0\n", "uevent": "DRIVER=i915\n",
                 "power/runtime_status": "active\n", "hwmon/hwmon4/name": "i915\n",
                 "hwmon/hwmon4/energy1_input": f"{energy_uj}\n",
                 "hwmon/hwmon4/power1_max": "190000000\n"})
    (root / f"card{n}" / "gt_cur_freq_mhz").write_text("2100\n")
    return dev


def test_the_current_clock_is_the_line_marked_with_a_star() -> None:
    assert current_clock("0: 500Mhz \n1: 1900Mhz *\n2: 2500Mhz \n") == 1900
    assert current_clock("0: 96Mhz \n1: 456Mhz \n") is None
    assert current_clock(None) is None


def test_cards_are_found_with_their_vendor_and_driver(tmp_path: Path) -> None:
    amd_card(tmp_path, 1)
    intel_card(tmp_path, 0)
    _write(tmp_path / "card2" / "device", {"vendor": "0x1af4\n", "uevent": "DRIVER=virtio-pci\n"})
    cards = find_cards(tmp_path)
    assert [(c.card, c.vendor, c.driver) for c in cards] == [
        ("card0", "Intel", "i915"), ("card1", "AMD", "amdgpu"), ("card2", "0x1af4", "virtio-pci")]
    assert cards[1].name == "AMD GPU 0x744c"
    assert cards[1].vram_total == 24 * GIB
    # the virtual display is a DRM card but no compute GPU: the probe leaves it out
    sample = GpuProbe(nvml=object(), drm_root=tmp_path).sample()
    assert [d.card for d in sample.devices] == ["card0", "card1"]


def test_an_amd_card_gives_busy_vram_power_temperature_and_clocks(tmp_path: Path) -> None:
    amd_card(tmp_path)
    r = CardReader(find_cards(tmp_path)[0]).read()
    assert (r.busy_percent, r.busy_reason) == (37.0, None)
    assert (r.vram_used, r.vram_total) == (4 * GIB, 24 * GIB)
    assert (r.power_w, r.power_from) == (85.0, "power1_average")  # 85,000,000 µW
    assert r.temp_c == 52.0  # 52,000 m°C
    assert (r.sclk_mhz, r.mclk_mhz) == (1900, 1249)
    assert (r.asleep, r.notes) == (False, [])


def test_power1_input_when_there_is_no_average(tmp_path: Path) -> None:
    dev = amd_card(tmp_path)
    (dev / "hwmon/hwmon3/power1_average").unlink()
    (dev / "hwmon/hwmon3/power1_input").write_text("212500000\n")
    r = CardReader(find_cards(tmp_path)[0]).read()
    assert (r.power_w, r.power_from) == (212.5, "power1_input")


def test_an_intel_card_gives_energy_and_frequency_and_says_why_no_busy(tmp_path: Path) -> None:
    dev = intel_card(tmp_path)
    clock = iter([0, 2_000_000_000])
    reader = CardReader(find_cards(tmp_path)[0], clock=lambda: next(clock))
    first = reader.read()
    assert first.energy_j == 123_456.789012  # 123,456,789,012 µJ
    assert (first.busy_percent, first.busy_reason) == (None, INTEL_BUSY_REASON)
    assert first.sclk_mhz == 2100
    assert first.power_w is None  # one reading of a counter is no power
    (dev / "hwmon/hwmon4/energy1_input").write_text(f"{123_456_789_012 + 60_000_000}\n")
    second = reader.read()
    # 60,000,000 µJ = 60 J over 2 s = 30 W
    assert (second.power_w, second.power_from) == (30.0, "energy1_input over 2.0 s")


def test_a_sleeping_gpu_is_not_woken(tmp_path: Path) -> None:
    dev = amd_card(tmp_path, power__runtime_status="suspended\n")
    # every attribute that would wake it is a FIFO: opening one would show in the notes
    for name in ("gpu_busy_percent", "pp_dpm_sclk", "pp_dpm_mclk",
                 "hwmon/hwmon3/power1_average", "hwmon/hwmon3/temp1_input"):
        (dev / name).unlink()
        os.mkfifo(dev / name)
    r = CardReader(find_cards(tmp_path)[0]).read()
    assert (r.asleep, r.busy_percent, r.busy_reason) == (True, None, ASLEEP)
    assert r.vram_used == 4 * GIB  # the memory manager's figure wakes nothing
    assert (r.power_w, r.temp_c, r.sclk_mhz, r.notes) == (None, None, None, [])


def test_hostile_files_are_set_aside_with_the_reason(tmp_path: Path) -> None:
    dev = amd_card(tmp_path, gpu_busy_percent="150\n", mem_info_vram_used=f"{30 * GIB}\n",
                   hwmon__hwmon3__power1_average=f"{2**40}\n",
                   hwmon__hwmon3__temp1_input="n/a\n")
    r = CardReader(find_cards(tmp_path)[0]).read()
    assert (r.busy_percent, r.vram_used, r.power_w, r.temp_c) == (None, None, None, None)
    assert r.busy_reason == "gpu_busy_percent 150 set aside: not a percentage"
    assert r.notes == [
        "gpu_busy_percent 150 set aside: not a percentage",
        f"mem_info_vram_used {30 * GIB} set aside: more than the total {24 * GIB}",
        "power1_average 1099511.6 W set aside: outside 0-10000 W",  # 2^40 µW
        "temp1_input: 'n/a' is not a number",
    ]
    (dev / "gpu_busy_percent").unlink()
    os.mkfifo(dev / "gpu_busy_percent")  # a FIFO would block a plain open()
    r = CardReader(find_cards(tmp_path)[0]).read()
    assert r.busy_reason == (f"{dev}/gpu_busy_percent cannot be read ({dev}/gpu_busy_percent "
                             "is a FIFO (named pipe), not a file)")


def _sample(gpu_probe: GpuProbe) -> ProbeSample:
    return ProbeSample(t_ns=0, wall_time="", system=None, processes=None,
                       gpu=gpu_probe.sample(), verdict=Verdict.of(()), cost_ms=0.0)


def test_preflight_lists_every_gpu_in_one_shape(tmp_path: Path) -> None:
    amd_card(tmp_path, 1)
    intel_card(tmp_path, 0)
    probe = GpuProbe(nvml=object(), drm_root=tmp_path)  # NVML: a library that has nothing
    result = aggregate([_sample(probe)])
    assert result.gpu_present is True
    gpus = result.to_dict()["gpus"]
    assert gpus[1] == {
        "index": 1, "card": "card1", "name": "AMD GPU 0x744c", "vendor": "AMD",
        "driver": "amdgpu", "source": "sysfs", "busy_percent": 37.0, "busy_reason": None,
        "vram_used_bytes": 4 * GIB, "vram_total_bytes": 24 * GIB, "power_w": 85.0,
        "power_from": "power1_average", "energy_j": None, "temp_c": 52.0,
        "clock_graphics_mhz": 1900, "clock_memory_mhz": 1249, "asleep": False, "notes": [],
        "thermal_state": None, "rails_w": None,
    }
    assert (gpus[0]["vendor"], gpus[0]["busy_percent"], gpus[0]["busy_reason"],
            gpus[0]["energy_j"]) == ("Intel", None, INTEL_BUSY_REASON, 123_456.789012)


def test_no_gpu_keeps_nvmls_reason(tmp_path: Path) -> None:
    sample = GpuProbe(nvml=object(), drm_root=tmp_path).sample()
    assert sample.available is False
    assert sample.reason is not None and sample.reason.startswith("NVML unavailable")
    assert device_dict  # the shape's writer is importable from the probe


def test_a_sample_costs_a_few_file_reads(tmp_path: Path) -> None:
    amd_card(tmp_path, 1)
    intel_card(tmp_path, 0)
    readers = [CardReader(c) for c in find_cards(tmp_path)[:2]]
    rounds = 200
    start = time.perf_counter_ns()
    for _ in range(rounds):
        for reader in readers:
            reader.read()
    per_sample_us = (time.perf_counter_ns() - start) / rounds / 1000
    print(f"\nsysfs GPU sample (one AMD + one Intel card, tmpfs): {per_sample_us:.0f} µs")
    assert readers[0].read().energy_j is not None  # the reader read what it timed


# --- the real CLI with the tree over /sys/class ------------------------------------------


def _can_unshare() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    return probe.returncode == 0


needs_namespace = pytest.mark.skipif(not _can_unshare(),
                                     reason="needs root and unshare -m (a private mount)")


@needs_namespace
def test_preflight_json_lists_an_amd_and_an_intel_gpu(tmp_path: Path) -> None:
    drm = tmp_path / "class" / "drm"
    amd_card(drm, 1)
    intel_card(drm, 0)
    script = (f"mount --bind {tmp_path / 'class'} /sys/class && exec timeout -s KILL 60 "
              f"{sys.executable} -m llmtop preflight --json --duration 0.5 "
              "--host 127.0.0.1:9")
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                          text=True, check=False, timeout=120)
    assert done.returncode in (0, 1, 2), done.stderr
    out = json.loads(done.stdout)
    by_card = {g["card"]: g for g in out["gpus"]}
    amd, intel = by_card["card1"], by_card["card0"]
    assert (amd["vendor"], amd["busy_percent"], amd["vram_used_bytes"], amd["power_w"]) == (
        "AMD", 37.0, 4 * GIB, 85.0)
    assert (intel["vendor"], intel["energy_j"], intel["busy_percent"]) == (
        "Intel", 123_456.789012, None)
    assert intel["busy_reason"] == INTEL_BUSY_REASON
    # the same figures in --version -v, what a bug report about a GPU carries
    script = (f"mount --bind {tmp_path / 'class'} /sys/class && exec timeout -s KILL 60 "
              f"{sys.executable} -m llmtop --version -v")
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                          text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.strip().startswith("gpu card1"))
    assert json.loads(line.split(None, 2)[2]) == amd


def test_the_panel_says_each_card_in_one_line(tmp_path: Path) -> None:
    from llmtop.tui.widgets.system_view import gpu_line

    amd_card(tmp_path, 1)
    intel_card(tmp_path, 0)
    sample = GpuProbe(nvml=object(), drm_root=tmp_path).sample()
    assert [gpu_line(d) for d in sample.devices] == [
        "card0 Intel n/a (i915)", "card1 AMD 37 % · 4.0 GiB / 24.0 GiB · 85 W (amdgpu)"]


def test_the_session_log_keeps_each_gpus_vendor_power_and_energy(tmp_path: Path) -> None:
    from llmtop.sessions.records.log import SessionLog, read_log

    drm = tmp_path / "drm"
    amd_card(drm, 1)
    intel_card(drm, 0)
    sample = _sample(GpuProbe(nvml=object(), drm_root=drm))
    log = SessionLog(tmp_path / "s.jsonl", {"kind": "session"})
    log.write_probe(sample.to_dict(), None)
    log.close()
    gpu = read_log(tmp_path / "s.jsonl").probes[0].gpu
    assert gpu is not None
    intel, amd = gpu.devices
    assert (amd.vendor, amd.util_percent, amd.power_w, amd.power_from, amd.memory_used) == (
        "AMD", 37.0, 85.0, "power1_average", 4 * GIB)
    assert (intel.vendor, intel.util_percent, intel.util_reason, intel.energy_j) == (
        "Intel", None, INTEL_BUSY_REASON, 123_456.789)  # the log keeps 3 decimals


def test_amd_and_intel_boards_are_energy_sources(tmp_path: Path) -> None:
    from llmtop.probes.energy.model import Kind, Role
    from llmtop.probes.energy.reader import discover_sources

    dev = amd_card(tmp_path, 1)
    intel_card(tmp_path, 0)
    found = discover_sources(tmp_path / "none", tmp_path / "none", nvml_lib=object(),
                             platform="linux", drm_root=tmp_path)
    gpus = {s.info.name: s for s in found.sources if s.info.role is Role.GPU}
    assert {n: (s.info.kind, s.info.covers) for n, s in gpus.items()} == {
        "drm:card0": (Kind.COUNTER, "Intel GPU card0 board (i915 hwmon energy1_input)"),
        "drm:card1": (Kind.POWER, ("AMD GPU card1 board (amdgpu hwmon power1_average, "
                                   "integrated power samples)")),
    }
    assert gpus["drm:card0"].read() == (123_456_789_012.0, None)  # µJ
    assert gpus["drm:card1"].read() == (85.0, None)  # 85,000,000 µW
    (dev / "power/runtime_status").write_text("suspended\n")
    assert gpus["drm:card1"].read() is None  # asleep: not woken, a gap
