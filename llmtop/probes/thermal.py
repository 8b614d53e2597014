"""Throttling seen at one moment, on every platform the kernel's files or NVML describe: what
held the CPU or the GPU back, as `Throttle`s ("the GPU was power-capped", "the CPU was at its
thermal limit"), read without privileges.

Sources, and where the kernel documents them:

* Linux thermal zones (Documentation/driver-api/thermal/sysfs-api.rst),
  `/sys/class/thermal/thermal_zoneN/`: `type` ("x86_pkg_temp", "acpitz", "cpu-thermal"...),
  `temp` (m°C), `trip_point_K_type` / `trip_point_K_temp` (m°C). A zone at or past its
  lowest "passive" trip point is being cooled by slowing its devices down (the thermal
  governor lowers the CPU's clock, a GPU's devfreq): a thermal throttle. "hot" and
  "critical" trips count too (past "critical" the kernel shuts down); "active" trips only
  start fans and do not count. A zone whose `mode` is "disabled" is skipped.
* hwmon (Documentation/hwmon/sysfs-interface.rst), `/sys/class/hwmon/hwmonN/`: `name`
  ("coretemp", "k10temp", "amdgpu"...), `tempK_input` (m°C) against `tempK_max` (the
  "high" limit: coretemp's is where the package starts throttling, PROCHOT) or else
  `tempK_crit`, with `tempK_label` ("Package id 0", "edge", "junction") naming the sensor.
  AMD's GPUs: amdgpu's hwmon gives edge/junction/mem temperatures with their `_crit`
  limits, read here, and `power1_average` against `power1_cap` (µW; Documentation/gpu/
  amdgpu/thermal.rst): an average within POWER_CAP_SHARE of the cap is a power cap. Its
  binary `device/gpu_metrics` table also carries a `throttle_status` bit mask, but at an
  offset that changes with the table's format and content revision
  (drivers/gpu/drm/amd/include/kgd_pp_interface.h, gpu_metrics_v1_0 to v3_0), so it is not
  decoded: the temperatures and the power against their limits stand for it. A GPU whose
  `device/power/runtime_status` is "suspended" is not read (reading would wake it).
* NVIDIA: NVML's clocks-event reasons (`GpuProbe.clocks`, probes/gpu.py): sw_power_cap and
  hw_power_brake_slowdown are a power cap, sw_/hw_thermal_slowdown a thermal limit,
  hw_slowdown either (NVML: "high temperature, power brake or power supply"); the others
  (idle, application clocks, sync boost, display clock) hold no busy GPU back and are not
  throttles here.

How a throttle is said ("the GPU was power-capped") is the record's: records/request.py,
ThrottleRecord.phrase.

The CPU's clock against its maximum is the probe verdict's `cpu-slow` finding
(probes/verdict.py) and each bench request's `freq_mhz`; it is not repeated here. Every file
is read through `gpu_sysfs.read_attr` (never blocks, bounded to a page); a figure that cannot
be read is no throttle, never a made-up one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from llmtop.probes.gpu import GpuClocks, GpuProbe
from llmtop.probes.gpu_sysfs import read_attr

THERMAL_ROOT = Path("/sys/class/thermal")
HWMON_ROOT = Path("/sys/class/hwmon")
COUNTED_TRIPS = ("passive", "hot", "critical")  # trip types whose crossing slows a device
# NVML clocks-event reasons that hold a busy GPU back, by cause (module docstring)
NVML_CAUSES = {"sw_power_cap": "power", "hw_power_brake_slowdown": "power",
               "sw_thermal_slowdown": "thermal", "hw_thermal_slowdown": "thermal",
               "hw_slowdown": "slowdown"}
_GPU_DRIVERS = ("amdgpu", "radeon", "nouveau", "i915", "xe")
_CPU_SENSORS = ("coretemp", "k10temp", "zenpower", "cpu_thermal", "cpu-thermal")
_TEMP_INPUT = re.compile(r"temp(\d+)_input")
# A board whose average power is within this share of its cap is held at the cap (the
# firmware's control loop settles a few % under it; a board far under its cap is not capped)
POWER_CAP_SHARE = 0.97


@dataclass(frozen=True, slots=True)
class Throttle:
    """One throttle seen. part: what was held back ("GPU", "CPU", "machine": a zone or
    sensor that names no device); cause: "power", "thermal" or "slowdown" (NVML's
    hw_slowdown: heat or power); source: who said so ("nvml", "thermal_zone", "hwmon");
    device: which board or sensor ("gpu0", "thermal_zone0 x86_pkg_temp", "hwmon2 amdgpu
    junction"); detail: the figure ("sw_power_cap", "97.0 °C >= passive trip 95.0 °C").
    A request's record carries it as records.request.ThrottleRecord, which says it."""

    part: str
    cause: str
    source: str
    device: str
    detail: str


def gpu_throttles(clocks: Iterable[GpuClocks]) -> tuple[Throttle, ...]:
    """NVML's clocks-event reasons that hold a busy GPU back (NVML_CAUSES), one per GPU and
    reason."""
    return tuple(Throttle("GPU", NVML_CAUSES[r], "nvml", f"gpu{c.index}", r)
                 for c in clocks for r in c.throttle_reasons or () if r in NVML_CAUSES)


@dataclass(frozen=True, slots=True)
class _Watched:
    """A temperature read at each reading against its fixed limit (°C), found once."""

    part: str
    source: str
    device: str
    path: Path  # the figure read at each reading
    limit_value: float  # °C, or W for a power cap
    limit: str  # "passive trip", "max", "crit", "power1_cap"...
    awake: Path | None = None  # a GPU's runtime_status: not read while "suspended"
    cause: str = "thermal"
    scale: float = 1000.0  # the file's unit per shown unit: m°C per °C, µW per W
    unit: str = "°C"
    share: float = 1.0  # the share of the limit at which it counts


def _milli(path: Path, scale: float = 1000.0) -> float | None:
    """A decimal integer attribute divided by `scale` (m°C → °C; µW → W with 1e6)."""
    text, _ = read_attr(path)
    if text is None or not re.fullmatch(r"-?\d{1,12}", text):
        return None
    return int(text) / scale


def _part(name: str) -> str:
    low = name.lower()
    if any(d in low for d in _GPU_DRIVERS) or low.startswith("gpu"):
        return "GPU"
    if any(c in low for c in _CPU_SENSORS) or low.startswith(("x86_pkg", "cpu", "soc")):
        return "CPU"
    return "machine"


def _listed(root: Path, prefix: str) -> list[Path]:
    try:
        names = sorted(n for n in os.listdir(root) if n.startswith(prefix))
    except OSError:
        return []
    return [root / n for n in names]


def find_zones(root: Path = THERMAL_ROOT) -> list[_Watched]:
    """Every enabled thermal zone with a counted trip point (its lowest), never raises."""
    out = []
    for zone in _listed(root, "thermal_zone"):
        if read_attr(zone / "mode")[0] == "disabled":
            continue
        kind = read_attr(zone / "type")[0] or "?"
        trips = []
        for k in range(32):  # the kernel allows at most THERMAL_MAX_TRIPS (12) today
            ttype, _ = read_attr(zone / f"trip_point_{k}_type")
            if ttype is None:
                break
            temp = _milli(zone / f"trip_point_{k}_temp")
            if ttype in COUNTED_TRIPS and temp is not None and temp > 0:
                trips.append((temp, ttype))
        if trips:
            temp, ttype = min(trips)
            out.append(_Watched(_part(kind), "thermal_zone", f"{zone.name} {kind}",
                                zone / "temp", temp, f"{ttype} trip"))
    return out


def _power_cap(hw: Path, name: str, files: set[str], awake: Path | None) -> list[_Watched]:
    """A board's average power against its power cap (amdgpu: power1_average against
    power1_cap, µW), when it has both: the GPU's firmware holds the average at the cap by
    lowering its clocks, so an average within POWER_CAP_SHARE of it is a power cap holding
    it back."""
    reading = next((f for f in ("power1_average", "power1_input") if f in files), None)
    if reading is None or "power1_cap" not in files:
        return []
    cap = _milli(hw / "power1_cap", 1e6)
    if cap is None or cap <= 0:
        return []
    return [_Watched(_part(name), "hwmon", f"{hw.name} {name} {reading}", hw / reading, cap,
                     "power1_cap", awake, "power", 1e6, "W", POWER_CAP_SHARE)]


def find_sensors(root: Path = HWMON_ROOT) -> list[_Watched]:
    """Every hwmon temperature with a max (else crit) limit above 0 °C, and a board's power
    against its cap (`_power_cap`); never raises."""
    out = []
    for hw in _listed(root, "hwmon"):
        name = read_attr(hw / "name")[0] or "?"
        try:
            files = set(os.listdir(hw))
        except OSError:
            continue
        part = _part(name)
        awake = hw / "device" / "power" / "runtime_status" if part == "GPU" else None
        out += _power_cap(hw, name, files, awake)
        for f in sorted(files):
            m = _TEMP_INPUT.fullmatch(f)
            if not m:
                continue
            n = m.group(1)
            label = read_attr(hw / f"temp{n}_label")[0] or f"temp{n}"
            for limit in ("max", "crit"):
                value = _milli(hw / f"temp{n}_{limit}") if f"temp{n}_{limit}" in files else None
                if value is not None and value > 0:
                    out.append(_Watched(part, "hwmon", f"{hw.name} {name} {label}", hw / f,
                                        value, limit, awake))
                    break
    return out


class ThermalReader:
    """Reads the watched temperatures (thermal zones and hwmon sensors with a limit, found
    on the first `read`) and says which are at or past their limit. About one file read per
    watched sensor; roots are parameters so a fake tree can stand in."""

    def __init__(self, thermal_root: Path = THERMAL_ROOT, hwmon_root: Path = HWMON_ROOT) -> None:
        self._roots = (thermal_root, hwmon_root)
        self._watched: list[_Watched] | None = None

    def read(self) -> tuple[Throttle, ...]:
        """The throttles now: each watched figure at or past its limit (a power within
        POWER_CAP_SHARE of its cap). Never raises."""
        if self._watched is None:
            self._watched = find_zones(self._roots[0]) + find_sensors(self._roots[1])
        out = []
        for w in self._watched:
            if w.awake is not None and read_attr(w.awake)[0] == "suspended":
                continue  # an asleep GPU is cool and idle, and reading it would wake it
            value = _milli(w.path, w.scale)
            if value is None or value < w.limit_value * w.share:
                continue
            share = f"{w.share:.0%} of " if w.share < 1 else ""
            out.append(Throttle(w.part, w.cause, w.source, w.device,
                                f"{value:.1f} {w.unit} >= {share}{w.limit} "
                                f"{w.limit_value:.1f} {w.unit}"))
        return tuple(out)


def merge_throttles(seen: tuple[Throttle, ...]) -> tuple[Throttle, ...]:
    """One throttle per sensor (and per NVML reason) in order of first sight, the later
    reading's figure kept: a zone past its trip at both edges of a request is one throttle,
    at its end temperature."""
    merged: dict[tuple[str, str, str], Throttle] = {}
    for t in seen:
        merged[(t.source, t.device, t.detail if t.source == "nvml" else "")] = t
    return tuple(merged.values())


class ThrottleWatch:
    """The throttles now from every source, for a request's two edges (`llmtop run`): NVML's
    reasons (`gpu`: a GpuProbe, its clocks: a few NVML calls) and the thermal zones' and
    hwmon sensors' (`thermal`). Never raises from `read()`."""

    def __init__(self, gpu: GpuProbe | None = None, thermal: ThermalReader | None = None) -> None:
        self._gpu = gpu or GpuProbe()
        self._thermal = thermal or ThermalReader()

    def read(self) -> tuple[Throttle, ...]:
        """Every throttle seen now (empty: none, or nothing to read them from)."""
        return gpu_throttles(self._gpu.clocks()) + self._thermal.read()


__all__ = ["ThermalReader", "Throttle", "ThrottleWatch", "find_sensors", "find_zones",
           "gpu_throttles", "merge_throttles"]
