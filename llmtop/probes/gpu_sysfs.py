"""AMD and Intel GPUs (and an NVIDIA card NVML cannot reach) from the kernel's own files under
`/sys/class/drm`: no root, no vendor stack, no library.

What is read, per `cardN` (connectors such as `card1-DP-1` are skipped), and where the
kernel documents it:

* identity: `device/vendor` (PCI vendor id: 0x1002 AMD, 0x8086 Intel, 0x10de NVIDIA),
  `device/device`, `device/uevent`'s `DRIVER=` line (amdgpu, i915, xe, nvidia), amdgpu's
  `device/product_name` where the board's FRU gives one. Read once per card.
* amdgpu (Documentation/gpu/amdgpu/thermal.rst and driver-misc.rst, "gpu_busy_percent",
  "mem_info_vram_used"): `device/gpu_busy_percent` (% of the last sample period the GPU was
  busy, 0-100), `device/mem_info_vram_used` / `mem_info_vram_total` (bytes),
  `device/pp_dpm_sclk` / `pp_dpm_mclk` (the clock levels, one line per level, the current
  one marked `*`: "1: 2100Mhz *").
* hwmon (Documentation/hwmon/sysfs-interface.rst), `device/hwmon/hwmon*/`: `power1_average`
  (average power, µW) or else `power1_input` (instantaneous power, µW), `energy1_input`
  (cumulative energy, µJ), `temp1_input` (m°C; amdgpu's temp1 is the "edge" sensor).
  i915 and xe give `energy1_input` on discrete cards (Documentation/ABI/testing/
  sysfs-driver-intel-i915-hwmon and sysfs-driver-intel-xe-hwmon: "Energy input of device in
  microjoules", accumulated in 64 bits by the driver) and no power reading: the power is
  then the energy counter's rise over the time between two samples.
* Intel frequency: i915's `cardN/gt_cur_freq_mhz`, xe's `device/tile0/gt0/freq0/cur_freq`
  (MHz). Intel's busy % is counted only by the i915/xe PMU (perf_event), which needs
  CAP_PERFMON or `kernel.perf_event_paranoid` <= 0: it is reported as n/a with that reason,
  never as 0.

A runtime-suspended device (`device/power/runtime_status` is "suspended") is not woken: the
amdgpu power-management attributes (busy %, clocks, hwmon) and i915's hwmon energy take a
runtime-PM reference to answer, which resumes the GPU, so a monitor reading them once a second
keeps an idle GPU awake (nvtop doubled a laptop GPU's idle power that way:
github.com/Syllo/nvtop/issues/230). Then only the VRAM figures (read from the memory
manager, no wake) are read and the rest is "asleep". Every file is opened without blocking
and refused unless regular (`files.open_regular`: a FIFO in sysfs would hang the open),
read bounded to one page; a figure that cannot be read or is out of its physical range is
None with the reason in `notes`, never 0.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from llmtop.files import read_bounded

DRM_ROOT = Path("/sys/class/drm")
ATTR_LIMIT = 4096  # a sysfs attribute is at most one page
VENDORS = {0x1002: "AMD", 0x8086: "Intel", 0x10DE: "NVIDIA"}
INTEL_BUSY_REASON = ("busy % is counted only by the i915/xe PMU (perf_event), which needs "
                     "CAP_PERFMON or kernel.perf_event_paranoid <= 0; not read")
ASLEEP = "asleep (runtime-suspended; reading it would wake the GPU)"
# Physical ranges outside which a figure is set aside (the reason kept): the energy reader's
# 10 kW bound for one device, a temperature a working chip can report.
MAX_POWER_W = 10_000.0
TEMP_RANGE_C = (-40.0, 150.0)
_CARD = re.compile(r"card(\d+)")
_CLOCK = re.compile(r"^\s*\d+:\s*(\d+)\s*mhz.*\*\s*$", re.IGNORECASE)


def read_attr(path: Path) -> tuple[str | None, str | None]:
    """(text stripped, None) of one sysfs attribute, or (None, why): missing, not a regular
    file, longer than a page, or refused by the driver (EIO, EPERM, EBUSY...)."""
    try:
        data = read_bounded(path, ATTR_LIMIT)
    except FileNotFoundError:
        return None, f"{path.name} not provided"
    except OSError as exc:  # NotRegularFile, FileTooLarge, a driver's error
        return None, f"{path} cannot be read ({exc.strerror or exc})"
    return data.decode("ascii", "replace").strip(), None


def parse_int(text: str | None, path: Path) -> tuple[int | None, str | None]:
    """A decimal integer attribute, or (None, why) for anything else."""
    if text is None:
        return None, None
    if not re.fullmatch(r"-?\d{1,20}", text):
        return None, f"{path.name}: {text[:40]!r} is not a number"
    return int(text), None


def current_clock(text: str | None) -> int | None:
    """The MHz of the level marked `*` in amdgpu's `pp_dpm_sclk` / `pp_dpm_mclk`
    ("0: 500Mhz\\n1: 2100Mhz *" → 2100); None when no line is marked."""
    for line in (text or "").splitlines():
        m = _CLOCK.match(line)
        if m:
            return int(m.group(1))
    return None


@dataclass(frozen=True, slots=True)
class DrmCard:
    """One GPU's fixed facts. card: "card1"; index: 1; device: the PCI device folder;
    vendor: "AMD" / "Intel" / "NVIDIA" / "0x1234"; driver: uevent's DRIVER ("amdgpu");
    name: the product name, or vendor + PCI device id; hwmon: the first hwmon folder (None:
    none); vram_total: bytes (amdgpu, read once); hwmon_files: the names in `hwmon`, listed
    once so a sample opens only the files that exist."""

    card: str
    index: int
    path: Path
    device: Path
    vendor: str | None
    driver: str | None
    name: str | None
    hwmon: Path | None
    vram_total: int | None = None
    hwmon_files: frozenset[str] = frozenset()


def find_cards(root: Path = DRM_ROOT) -> tuple[DrmCard, ...]:
    """Every `cardN` under `root` with a `device` folder, ordered by N; one entry per PCI
    device. Never raises (an unreadable root gives ())."""
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return ()
    found: dict[str, DrmCard] = {}
    for name in names:
        m = _CARD.fullmatch(name)
        device = root / name / "device"
        if not m or not device.is_dir():
            continue
        key = os.path.realpath(device)
        if key not in found:
            found[key] = _card(name, int(m.group(1)), root / name, device)
    return tuple(sorted(found.values(), key=lambda c: c.index))


def _card(name: str, index: int, path: Path, device: Path) -> DrmCard:
    vendor_id, _ = read_attr(device / "vendor")
    vendor = None
    if vendor_id is not None:
        try:
            vendor = VENDORS.get(int(vendor_id, 16), vendor_id)
        except ValueError:
            vendor = None
    uevent, _ = read_attr(device / "uevent")
    driver = next((line.partition("=")[2] for line in (uevent or "").splitlines()
                   if line.startswith("DRIVER=")), None)
    product, _ = read_attr(device / "product_name")
    device_id, _ = read_attr(device / "device")
    label = product or (f"{vendor or 'GPU'} GPU {device_id}" if device_id else vendor)
    try:
        hwmons = sorted(p for p in (device / "hwmon").iterdir() if p.name.startswith("hwmon"))
    except OSError:
        hwmons = []
    files: frozenset[str] = frozenset()
    if hwmons:
        try:
            files = frozenset(os.listdir(hwmons[0]))
        except OSError:
            files = frozenset()
    total = None
    if driver == "amdgpu":
        path_total = device / "mem_info_vram_total"
        total, _ = parse_int(read_attr(path_total)[0], path_total)
    return DrmCard(name, index, path, device, vendor, driver, label,
                   hwmons[0] if hwmons else None, total, files)


@dataclass(slots=True)
class Reading:
    """One card's figures now (module docstring for files and units). busy_percent with
    busy_reason when None; vram_* bytes; power_w with power_from (the file, or the energy
    counter's rise); energy_j: the board's cumulative counter in J (since the driver
    loaded); temp_c; sclk_mhz / mclk_mhz: current core and memory clocks; asleep: the
    device was runtime-suspended and not woken; notes: why a figure is missing or set
    aside."""

    busy_percent: float | None = None
    busy_reason: str | None = None
    vram_used: int | None = None
    vram_total: int | None = None
    power_w: float | None = None
    power_from: str | None = None
    energy_j: float | None = None
    temp_c: float | None = None
    sclk_mhz: int | None = None
    mclk_mhz: int | None = None
    asleep: bool = False
    notes: list[str] = field(default_factory=list)


class CardReader:
    """Reads one card on each `read()`: one open and read per file, about 8 files for an
    amdgpu card, 3 for Intel. Keeps the last energy reading to give Intel's power; `clock`
    (ns, default perf_counter_ns) times it."""

    def __init__(self, card: DrmCard, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self.card = card
        self._clock = clock
        self._last_energy: tuple[int, float] | None = None  # perf_counter_ns, J

    def _int(self, path: Path, r: Reading) -> int | None:
        text, why = read_attr(path)
        value, bad = parse_int(text, path)
        if why or bad:
            r.notes.append(why or bad or "")
        return value

    def read(self) -> Reading:
        """The card's figures now; never raises."""
        card, r = self.card, Reading(vram_total=self.card.vram_total)
        state, _ = read_attr(card.device / "power" / "runtime_status")
        r.asleep = state == "suspended"
        if card.driver == "amdgpu":
            r.vram_used = self._int(card.device / "mem_info_vram_used", r)
        if r.asleep:
            r.busy_reason = ASLEEP
            return r
        if card.driver == "amdgpu":
            self._amd(r)
        elif card.vendor == "Intel":
            r.busy_reason = INTEL_BUSY_REASON
            self._intel_freq(r)
        self._hwmon(r)
        return r

    def _amd(self, r: Reading) -> None:
        dev = self.card.device
        busy = self._int(dev / "gpu_busy_percent", r)
        if busy is not None and not 0 <= busy <= 100:
            r.notes.append(f"gpu_busy_percent {busy} set aside: not a percentage")
            busy = None
        r.busy_percent = None if busy is None else float(busy)
        if busy is None:
            r.busy_reason = next((n for n in r.notes if "busy" in n), "not provided")
        if r.vram_used is not None and r.vram_total is not None and r.vram_used > r.vram_total:
            r.notes.append(f"mem_info_vram_used {r.vram_used} set aside: more than the "
                           f"total {r.vram_total}")
            r.vram_used = None
        r.sclk_mhz = current_clock(read_attr(dev / "pp_dpm_sclk")[0])
        r.mclk_mhz = current_clock(read_attr(dev / "pp_dpm_mclk")[0])

    def _intel_freq(self, r: Reading) -> None:
        for path in (self.card.path / "gt_cur_freq_mhz",
                     self.card.device / "tile0" / "gt0" / "freq0" / "cur_freq"):
            text, _ = read_attr(path)
            if text is not None:
                r.sclk_mhz = parse_int(text, path)[0]
                return

    def _hwmon(self, r: Reading) -> None:
        hw, files = self.card.hwmon, self.card.hwmon_files
        if hw is None:
            r.notes.append("no hwmon folder: no power, energy or temperature")
            return
        for name in ("power1_average", "power1_input"):
            if name in files:
                uw = self._int(hw / name, r)
                if uw is not None:
                    self._set_power(r, uw / 1e6, name)
                break
        if "energy1_input" in files:
            uj = self._int(hw / "energy1_input", r)
            if uj is not None and uj >= 0:
                self._energy(r, uj / 1e6)
        if "temp1_input" in files:
            mc = self._int(hw / "temp1_input", r)
            if mc is not None and TEMP_RANGE_C[0] <= mc / 1000 <= TEMP_RANGE_C[1]:
                r.temp_c = mc / 1000
            elif mc is not None:
                r.notes.append(f"temp1_input {mc} m°C set aside: not a chip's temperature")

    def _set_power(self, r: Reading, watts: float, source: str) -> None:
        if 0 <= watts <= MAX_POWER_W:
            r.power_w, r.power_from = watts, source
        else:
            r.notes.append(f"{source} {watts:.1f} W set aside: outside 0-{MAX_POWER_W:.0f} W")

    def _energy(self, r: Reading, joules: float) -> None:
        now = self._clock()
        r.energy_j = joules
        last, self._last_energy = self._last_energy, (now, joules)
        if r.power_w is not None or last is None or now <= last[0]:
            return
        if joules < last[1]:
            r.notes.append("energy1_input went backwards (driver reloaded): no power this time")
            return
        seconds = (now - last[0]) / 1e9
        self._set_power(r, (joules - last[1]) / seconds, f"energy1_input over {seconds:.1f} s")
