"""Apple Silicon's GPU, power per rail, thermal pressure, memory pressure and swap, in the
vendor-neutral shapes of `probes.gpu` (a `GpuSample` of one `GpuDevice`), so the panel, the
session log and `preflight --json` need no platform branch above this layer.

Sources, each named in the figure it gives (`AppleSample.sources`), none needing root:

* power per rail (CPU, GPU, ANE, DRAM, W): `zeus-apple-silicon`'s cumulative IOReport energy
  (`energy.apple`), each figure the counter's rise over the time that really passed between
  two samples (`energy.apple.rail_power_w`);
* GPU busy % and the memory the GPU holds: `ioreg -r -c AGXAccelerator -a` (a plist, read with
  plistlib): `PerformanceStatistics`' "Device Utilization %" and "In use system memory"
  (bytes); the same keys Activity Monitor's GPU history and exelban/stats read;
* thermal pressure: `notifyutil -g com.apple.system.thermalpressurelevel`, the kernel's level
  (OSThermalNotification.h: 0 nominal, 1 moderate, 2 heavy, 3 trapping, 4 sleeping), said in
  `NSProcessInfo.thermalState`'s words (nominal, fair, serious, critical). This is the level
  `powermetrics -s thermal` prints; `thermalState` itself lags it (macmade/Hot #118: "Fair"
  where powermetrics said "heavy"). `pmset -g therm`'s CPU speed limit is kept where it is
  recorded (Intel Macs; on Apple Silicon it prints only "No … level has been recorded");
* memory pressure and swap: `sysctl vm.swapusage kern.memorystatus_level` (the % of memory
  the kernel counts as free, the figure behind Activity Monitor's memory pressure).

Not read, each said with its reason, never shown as 0: GPU frequency and whole-system power
(IOReport's "GPU Stats" residencies and the SMC's PSTR key, which zeus-apple-silicon does not
read), memory bandwidth (the DCS counters are not in its Energy Model group). Each command runs
with a COMMAND_TIMEOUT_S timeout; a command missing, failing or printing nothing usable is a
reason, never an exception.
"""

from __future__ import annotations

import platform
import plistlib
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llmtop.probes.energy.apple import RAILS, CumulativeReader, load_library, rail_power_w
from llmtop.probes.gpu import GpuDevice, GpuProbe, GpuSample

SOURCE = "apple"
COMMAND_TIMEOUT_S = 2.0
OUTPUT_LIMIT = 4 * 1024 * 1024  # an ioreg plist of one accelerator is ~20 KB
IOREG = ("ioreg", "-r", "-c", "AGXAccelerator", "-a")
THERMAL = ("notifyutil", "-g", "com.apple.system.thermalpressurelevel")
PMSET = ("pmset", "-g", "therm")
SYSCTL = ("sysctl", "vm.swapusage", "kern.memorystatus_level")
# OSThermalNotification.h's pressure levels → NSProcessInfo.thermalState's words
THERMAL_STATES = {0: "nominal", 1: "fair", 2: "serious", 3: "critical", 4: "critical"}
THERMAL_LEVELS = {0: "nominal", 1: "moderate", 2: "heavy", 3: "trapping", 4: "sleeping"}
NOT_READ = {
    "gpu_freq": "GPU frequency: IOReport's GPU Stats residencies are not read by "
                "zeus-apple-silicon",
    "system_power": "whole-system power: the SMC's PSTR key is not read by zeus-apple-silicon",
    "bandwidth": "memory bandwidth: the DCS counters are not in IOReport's Energy Model group",
}
Runner = Callable[[Sequence[str]], tuple[str | None, str | None]]


def run_command(argv: Sequence[str]) -> tuple[str | None, str | None]:
    """(stdout, None) of a short system command, or (None, why): missing, failed, timed out
    after COMMAND_TIMEOUT_S, or printed more than OUTPUT_LIMIT. Never raises."""
    try:
        done = subprocess.run(list(argv), capture_output=True, timeout=COMMAND_TIMEOUT_S,
                              check=False)
    except FileNotFoundError:
        return None, f"{argv[0]} is not on this machine"
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{argv[0]} failed: {type(exc).__name__}: {exc}"
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip()[:200]
        return None, f"{argv[0]} exited {done.returncode}: {err or 'no message'}"
    if len(done.stdout) > OUTPUT_LIMIT:
        return None, f"{argv[0]} printed {len(done.stdout)} bytes, over {OUTPUT_LIMIT}"
    return done.stdout.decode("utf-8", "replace"), None


@dataclass(frozen=True, slots=True)
class AgxReading:
    """One AGX accelerator's `PerformanceStatistics`: busy_percent ("Device Utilization %",
    0-100), renderer / tiler %, in_use_bytes ("In use system memory"), alloc_bytes ("Alloc
    system memory"), model (the registry's "model", when given); None where absent or out of
    range (a busy % past 100 is set aside, its reason in `notes`)."""

    busy_percent: float | None
    renderer_percent: float | None
    tiler_percent: float | None
    in_use_bytes: int | None
    alloc_bytes: int | None
    model: str | None
    notes: tuple[str, ...] = ()


def parse_ioreg(data: bytes | str) -> tuple[AgxReading | None, str | None]:
    """`ioreg -r -c AGXAccelerator -a`'s plist (an array of registry entries) → the first
    entry's reading, or (None, why): not a plist, no entry, no PerformanceStatistics."""
    raw = data.encode() if isinstance(data, str) else data
    try:
        entries = plistlib.loads(raw)
    except (plistlib.InvalidFileException, ValueError, TypeError) as exc:
        return None, f"ioreg: not a plist ({exc})"
    if isinstance(entries, dict):
        entries = [entries]
    if not isinstance(entries, list) or not entries or not isinstance(entries[0], dict):
        return None, "ioreg: no AGXAccelerator entry (not Apple Silicon's GPU)"
    stats = entries[0].get("PerformanceStatistics")
    if not isinstance(stats, dict):
        return None, "ioreg: the accelerator has no PerformanceStatistics"
    notes: list[str] = []
    busy, renderer, tiler = (_percent(stats, k, notes) for k in
                             ("Device Utilization %", "Renderer Utilization %",
                              "Tiler Utilization %"))
    model = entries[0].get("model")
    return AgxReading(busy, renderer, tiler, _count(stats, "In use system memory"),
                      _count(stats, "Alloc system memory"),
                      model if isinstance(model, str) else None, tuple(notes)), None


def _percent(stats: dict[str, Any], key: str, notes: list[str]) -> float | None:
    value = stats.get(key)
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    if not 0 <= value <= 100:
        notes.append(f"{key} = {value}: outside 0-100, set aside")
        return None
    return float(value)


def _count(stats: dict[str, Any], key: str) -> int | None:
    value = stats.get(key)
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63
    return value if ok else None


def parse_thermal_pressure(text: str) -> tuple[str | None, int | None, str | None]:
    """`notifyutil -g com.apple.system.thermalpressurelevel` ("…thermalpressurelevel 2") →
    (state in NSProcessInfo's words, the kernel level, None), or (None, None, why)."""
    match = re.search(r"thermalpressurelevel\s+(-?\d+)\s*$", text.strip())
    if match is None:
        return None, None, f"notifyutil: no level in {text.strip()[:60]!r}"
    level = int(match.group(1))
    if level not in THERMAL_STATES:
        return None, level, f"notifyutil: unknown thermal pressure level {level}"
    return THERMAL_STATES[level], level, None


def parse_pmset_therm(text: str) -> dict[str, int | bool | None]:
    """`pmset -g therm` → {"speed_limit", "scheduler_limit", "available_cpus"} (% / count;
    None where not printed: Apple Silicon prints only notes) and "warning_recorded" (False
    when both "No thermal/performance warning level has been recorded" notes are there)."""
    out: dict[str, int | bool | None] = {}
    for key, name in (("speed_limit", "CPU_Speed_Limit"),
                      ("scheduler_limit", "CPU_Scheduler_Limit"),
                      ("available_cpus", "CPU_Available_CPUs")):
        found = re.findall(rf"{name}\s*=\s*(\d+)", text)
        out[key] = int(found[-1]) if found else None
    quiet = ("No thermal warning level has been recorded" in text
             and "No performance warning level has been recorded" in text)
    out["warning_recorded"] = not quiet
    return out


_SIZE = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_sysctl(text: str) -> dict[str, int | None]:
    """`sysctl vm.swapusage kern.memorystatus_level` → {"swap_total", "swap_used"} (bytes)
    and "memory_free_percent" (the kernel's memorystatus level, 0-100); None where absent."""
    out: dict[str, int | None] = {"swap_total": None, "swap_used": None,
                                  "memory_free_percent": None}
    for key, name in (("swap_total", "total"), ("swap_used", "used")):
        m = re.search(rf"vm\.swapusage:.*?\b{name} = ([0-9.]+)([KMGT])", text)
        if m:
            out[key] = round(float(m.group(1)) * _SIZE[m.group(2)])
    level = re.search(r"kern\.memorystatus_level:\s*(\d+)", text)
    if level and 0 <= int(level.group(1)) <= 100:
        out["memory_free_percent"] = int(level.group(1))
    return out


@dataclass(frozen=True, slots=True)
class AppleSample:
    """One reading of an Apple Silicon Mac's figures; None where not known, its reason in
    `notes` (never 0).

    gpu_busy_percent: "Device Utilization %" (0-100); gpu_memory_bytes: "In use system memory".
    power_w: rail ("cpu", "gpu", "ane", "dram") → W over window_s, the seconds that really
    passed since the previous sample (None on the first sample, or for a rail the chip lacks).
    thermal_state: "nominal" / "fair" / "serious" / "critical"; thermal_level: the kernel's
    0-4. speed_limit_percent: pmset's CPU_Speed_Limit where recorded. memory_free_percent: the
    kernel's memorystatus level; swap_used / swap_total: bytes. sources: figure → what gave it.
    """

    gpu_busy_percent: float | None = None
    gpu_memory_bytes: int | None = None
    gpu_model: str | None = None
    power_w: dict[str, float | None] = field(default_factory=dict)
    window_s: float | None = None
    thermal_state: str | None = None
    thermal_level: int | None = None
    speed_limit_percent: int | None = None
    memory_free_percent: int | None = None
    swap_used: int | None = None
    swap_total: int | None = None
    sources: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def device(self) -> GpuDevice:
        """The GPU in the vendor-neutral shape: busy %, the memory it holds, its rail's power;
        the machine-wide figures (thermal pressure, other rails, memory pressure) as notes."""
        extra = [f"thermal pressure: {self.thermal_state} (level {self.thermal_level})"
                 if self.thermal_state else None]
        extra += [f"{rail} power: {w:.2f} W" for rail, w in self.power_w.items()
                  if w is not None and rail != "gpu"]
        if self.memory_free_percent is not None:
            extra.append(f"memory free (kernel memorystatus level): "
                         f"{self.memory_free_percent} %")
        gpu_w = self.power_w.get("gpu")
        return GpuDevice(
            index=0, name=self.gpu_model, util_percent=self.gpu_busy_percent,
            mem_util_percent=None, memory_used=self.gpu_memory_bytes, memory_total=None,
            temperature_c=None, clock_graphics_mhz=None, clock_memory_mhz=None,
            clock_graphics_max_mhz=None, clock_memory_max_mhz=None, throttle_reasons=None,
            power_w=gpu_w, processes=(), vendor="Apple", driver="AGX", source=SOURCE,
            util_reason=None if self.gpu_busy_percent is not None else self.sources.get(
                "gpu_busy", "ioreg gave no Device Utilization %"),
            power_from=(f"IOReport GPU Energy over {self.window_s:.3f} s"
                        if gpu_w is not None and self.window_s else None),
            notes=tuple(n for n in extra if n) + self.notes, thermal_state=self.thermal_state,
            rails_w={rail: w for rail, w in self.power_w.items() if w is not None} or None)


class AppleProbe(GpuProbe):
    """The probe panel's GPU probe on Apple Silicon: `sample()` gives a `GpuSample` of one
    Apple `GpuDevice` and keeps the full `AppleSample` in `last`. `lib`: zeus_apple_silicon
    (default: imported on macOS arm64); `run`: the command runner (tests replay recorded
    outputs); `clock`: perf_counter ns. Never raises from `sample()`."""

    def __init__(self, lib: Any | None = None, run: Runner = run_command,
                 clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self._run = run
        self._clock = clock
        self._energy: CumulativeReader | None = None
        self._energy_reason: str | None = None
        if lib is None:
            lib, self._energy_reason = load_library()
        if lib is not None:
            try:
                self._energy = CumulativeReader(lib.AppleEnergyMonitor())
            except Exception as exc:  # noqa: BLE001 - IOReport refused: said, not raised
                self._energy_reason = f"IOReport energy: {type(exc).__name__}: {exc}"
        self._previous: dict[str, tuple[int, float]] = {}
        self.last: AppleSample | None = None

    def clocks(self) -> tuple[()]:
        """No NVML clocks on a Mac."""
        return ()

    def sample(self) -> GpuSample:
        """Every figure now (see the module docstring for the sources)."""
        notes: list[str] = []
        sources: dict[str, str] = {}
        fields: dict[str, Any] = {}
        self._gpu(fields, sources, notes)
        self._thermal(fields, sources, notes)
        self._memory(fields, sources, notes)
        power, window = self._power(sources, notes)
        notes.extend(NOT_READ.values())
        self.last = AppleSample(power_w=power, window_s=window, sources=sources,
                                notes=tuple(notes), **fields)
        return GpuSample(available=True, source=SOURCE, devices=(self.last.device(),))

    def _gpu(self, fields: dict[str, Any], sources: dict[str, str], notes: list[str]) -> None:
        out, why = self._run(IOREG)
        reading, why = parse_ioreg(out) if out is not None else (None, why)
        if reading is None:
            notes.append(f"GPU: {why}")
            return
        fields.update(gpu_busy_percent=reading.busy_percent,
                      gpu_memory_bytes=reading.in_use_bytes, gpu_model=reading.model)
        sources["gpu_busy"] = "ioreg AGXAccelerator PerformanceStatistics"
        notes.extend(reading.notes)

    def _thermal(self, fields: dict[str, Any], sources: dict[str, str],
                 notes: list[str]) -> None:
        out, why = self._run(THERMAL)
        state, level, why = parse_thermal_pressure(out) if out is not None else (None, None, why)
        if state is None:
            notes.append(f"thermal pressure: {why}")
        else:
            fields.update(thermal_state=state, thermal_level=level)
            sources["thermal_state"] = "notifyutil com.apple.system.thermalpressurelevel"
        out, why = self._run(PMSET)
        if out is not None:
            limit = parse_pmset_therm(out)["speed_limit"]
            if isinstance(limit, int) and not isinstance(limit, bool):
                fields["speed_limit_percent"] = limit
                sources["speed_limit"] = "pmset -g therm"

    def _memory(self, fields: dict[str, Any], sources: dict[str, str],
                notes: list[str]) -> None:
        out, why = self._run(SYSCTL)
        if out is None:
            notes.append(f"memory pressure and swap: {why}")
            return
        fields.update(parse_sysctl(out))
        sources["memory"] = "sysctl vm.swapusage kern.memorystatus_level"

    def _power(self, sources: dict[str, str],
               notes: list[str]) -> tuple[dict[str, float | None], float | None]:
        """Each rail's W since the previous sample, over the real elapsed seconds."""
        if self._energy is None:
            notes.append(f"power: {self._energy_reason}")
            return {}, None
        try:
            t_ns = self._clock()
            now = {rail: self._energy.value(rail) for rail in RAILS}
        except Exception as exc:  # noqa: BLE001 - a failed read is a gap
            notes.append(f"power: IOReport read failed: {type(exc).__name__}: {exc}")
            return {}, None
        power: dict[str, float | None] = {}
        window: float | None = None
        for rail, mj in now.items():
            before = self._previous.get(rail)
            if mj is None:
                continue
            power[rail] = rail_power_w(before, (t_ns, mj)) if before else None
            window = (t_ns - before[0]) / 1e9 if before else window
            self._previous[rail] = (t_ns, mj)
        sources["power"] = "zeus-apple-silicon (IOReport Energy Model)"
        return power, window

    def raw(self) -> dict[str, Any]:
        """Every source's raw reading now, for a bug report (`llmtop --version -v`)."""
        out: dict[str, Any] = {}
        for name, argv in (("ioreg", IOREG), ("thermal", THERMAL), ("pmset", PMSET),
                           ("sysctl", SYSCTL), ("chip", CHIP)):
            text, why = self._run(argv)
            out[name] = text if text is not None else f"n/a: {why}"
        if self._energy is not None:
            try:
                self._energy.value("cpu")
                out["zeus_apple_silicon"] = self._energy.raw()
            except Exception as exc:  # noqa: BLE001
                out["zeus_apple_silicon"] = f"n/a: {type(exc).__name__}: {exc}"
        else:
            out["zeus_apple_silicon"] = f"n/a: {self._energy_reason}"
        return out


CHIP = ("sysctl", "machdep.cpu.brand_string", "hw.model")
# What IOReport's channel map (energy.apple.rail_of) was checked against. The names are
# matched, never the order, so a reordered list (macOS 26 → 27) reads the same.
CHANNEL_MAP_CHECKED = (
    "IOReport Energy Model channels matched by name; checked against recorded channel lists "
    "of an M1 Ultra (lablup/all-smi #424) and an M2 Ultra (vladkens/macmon #17), whose macOS "
    "versions were not stated, and the macOS 26 → 27 reorder rebuilt from them; not yet run "
    "on a Mac")


def parse_chip(text: str) -> dict[str, str | None]:
    """`sysctl machdep.cpu.brand_string hw.model` → {"chip": "Apple M1", "model":
    "MacBookPro18,2"}; None where a line is missing or empty."""
    out: dict[str, str | None] = {"chip": None, "model": None}
    for key, name in (("chip", "machdep.cpu.brand_string"), ("model", "hw.model")):
        found = re.search(rf"^{re.escape(name)}:[ \t]*(.*?)\s*$", text, re.MULTILINE)
        out[key] = found.group(1)[:200] if found and found.group(1) else None
    return out


def mac_environment(system: str = sys.platform, run: Runner = run_command,
                    mac_ver: Callable[[], tuple[str, Any, str]] = platform.mac_ver,
                    ) -> dict[str, Any] | None:
    """A Mac's part of the environment record: macos_version (platform.mac_ver, "15.1"),
    arch ("arm64"), chip (machdep.cpu.brand_string, "Apple M4") and model (hw.model,
    "Mac16,10"), each None where not given (with `notes` saying why), and
    energy_channel_map: what the IOReport channel map was checked on (CHANNEL_MAP_CHECKED).
    None off macOS (nothing is run there)."""
    if system != "darwin":
        return None
    version, _, arch = mac_ver()
    out, why = run(CHIP)
    chip = parse_chip(out) if out is not None else {"chip": None, "model": None}
    notes = [] if out is not None else [f"chip and model: {why}"]
    return {"macos_version": version or None, "arch": arch or None, **chip,
            "energy_channel_map": CHANNEL_MAP_CHECKED, "notes": notes}


def gpu_probe() -> GpuProbe:
    """The GPU probe for this machine: AppleProbe on macOS arm64, else GpuProbe."""
    from llmtop.probes.energy.apple import on_apple_silicon

    return AppleProbe() if on_apple_silicon() else GpuProbe()


def version_lines(probe: AppleProbe | None = None) -> list[str]:
    """`llmtop --version -v`'s Apple lines: every source's raw reading, one per line (the
    output of each command with its newlines shown as ' | ')."""
    found = probe if probe is not None else AppleProbe()
    lines = []
    for name, value in found.raw().items():
        text = value if isinstance(value, str) else repr(value)
        lines.append(f"  {'apple ' + name:<24} {' | '.join(text.strip().splitlines())[:2000]}")
    return lines
