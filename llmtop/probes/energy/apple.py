"""Apple Silicon energy per rail (CPU, GPU, Neural Engine, DRAM) through `zeus-apple-silicon`,
without root.

The library (ML.ENERGY's, Apache-2.0; installed only on macOS arm64, see
docs/guide/apple-silicon.md for why this one) subscribes to IOReport's "Energy Model" group and
gives `AppleEnergyMonitor().get_cumulative_energy()`: cumulative counters in mJ per rail
(`cpu_total_mj`, `gpu_mj`, `ane_mj`, `dram_mj`, `gpu_sram_mj`; None where the chip has no such
channel). They are read here as COUNTER sources, one per rail, stamped with
`time.perf_counter_ns()` at each read: a window's joules are divided by the time that really
passed between two reads, never by the interval asked for (a 1000 ms sleep lasts ~1009 ms,
and the figure would be ~1 % high).

The library is imported only on darwin/arm64 (`load_library`), so no other install imports it.
One library call serves all rails of one sampler beat (`CumulativeReader`): the first rail read
again starts a new call.

IOReport's own rules, learnt by the monitors that read it:

* Channels are matched by name, never by index (`rail_of`): their order moved between macOS 26
  and 27, and multi-die chips prefix them ("DIE_0_CPU Energy", "ANE0_1", "DRAM0_1").
* The CPU, ANE and DRAM counters are published in batches (about every 500 ms on an M1 Ultra,
  lablup/all-smi #424) while "GPU Energy" moves at every read: a counter that did not move
  over a short span is normal; one that did not move over FROZEN_SPAN_S while the CPU was
  busy is stalled (macOS 27's "CPU Energy" channel: macmon #76, stats #3336/#3608), and its
  reading is unavailable, never 0 J.
* The values are the SoC's energy model, estimated from activity, frequency and voltage, not a
  sensor (the library's README, "Accuracy"); the resolution is 1 mJ.
"""

from __future__ import annotations

import importlib
import platform as platform_module
import re
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from llmtop.probes.energy.model import Kind, Role, SourceInfo

LIBRARY = "zeus_apple_silicon"  # the module; the distribution is zeus-apple-silicon
# rail → (AppleEnergyMetrics field, what the joules cover)
RAILS: dict[str, tuple[str, str]] = {
    "cpu": ("cpu_total_mj", "Apple SoC CPU clusters (IOReport energy model)"),
    "gpu": ("gpu_mj", "Apple SoC GPU (IOReport energy model)"),
    "ane": ("ane_mj", "Apple Neural Engine (IOReport energy model)"),
    "dram": ("dram_mj", "DRAM of the Apple SoC (IOReport energy model)"),
}
FROZEN_SPAN_S = 2.0  # four publication batches of ~0.5 s: a live counter moves in this span
FROZEN_BUSY_PERCENT = 5.0  # machine CPU busy %: even 5 % of an M-series CPU draws > 0.1 W
# IOReport unit labels → mJ per unit (the library's convert_to_mj, apple_energy.hpp)
UNIT_MJ = {"nJ": 1e-6, "uJ": 1e-3, "µJ": 1e-3, "mJ": 1.0, "cJ": 10.0, "dJ": 100.0,
           "J": 1e3, "kJ": 1e6}


def on_apple_silicon(system: str = sys.platform, machine: str | None = None) -> bool:
    """True on macOS on an arm64 CPU (`platform.machine()` unless `machine` is given)."""
    found = platform_module.machine() if machine is None else machine
    return system == "darwin" and found == "arm64"


def load_library(system: str = sys.platform, machine: str | None = None) -> tuple[Any, str | None]:
    """(the zeus_apple_silicon module, None), or (None, why): not macOS arm64 (then it is
    never imported), or not installed, or its import failed. Never raises."""
    if not on_apple_silicon(system, machine):
        return None, "Apple: IOReport energy is read on macOS on Apple Silicon only"
    try:
        return importlib.import_module(LIBRARY), None
    except ImportError as exc:
        return None, (f"Apple: zeus-apple-silicon is not installed ({exc}); "
                      "pip install zeus-apple-silicon")
    except Exception as exc:  # noqa: BLE001 - a broken native module is a reason, not a crash
        return None, f"Apple: zeus-apple-silicon failed to load: {type(exc).__name__}: {exc}"


def rail_of(channel: str) -> str | None:
    """The rail an IOReport "Energy Model" channel belongs to, by its name, or None for a
    channel that is a part of one (per core, per cluster, "_SRAM", "DTL", "CPM") and must not
    be added to it. Whole names, as macmon and all-smi match them: "GPU Energy"; "CPU Energy"
    or a die's "DIE_1_CPU Energy"; "ANE", "ANE0", "ANE0_1"; "DRAM", "DRAM0", "DRAM0_1"."""
    if channel == "GPU Energy":
        return "gpu"
    for rail, pattern in _CHANNELS:
        if pattern.fullmatch(channel):
            return rail
    return None


_CHANNELS = (
    ("cpu", re.compile(r"(DIE_\d+_)?CPU Energy")),
    ("ane", re.compile(r"ANE(\d+(_\d+)?)?")),
    ("dram", re.compile(r"DRAM(\d+(_\d+)?)?")),
)


def rails_from_channels(channels: Iterable[tuple[str, str, float]]) -> dict[str, float]:
    """Sum raw IOReport channels (name, unit label, value) into mJ per rail (`rail_of`);
    channels of no rail, or in a unit not in UNIT_MJ, are left out."""
    out: dict[str, float] = {}
    for name, unit, value in channels:
        rail, scale = rail_of(name), UNIT_MJ.get(unit)
        if rail is not None and scale is not None:
            out[rail] = out.get(rail, 0.0) + value * scale
    return out


class CumulativeReader:
    """One `AppleEnergyMonitor`, read once per sampler beat for every rail: `value(rail)`
    calls the library when this rail was already served from the current reading (a new beat)
    or nothing was read yet. `raw()` gives the last reading's fields, for `--version -v`."""

    def __init__(self, monitor: Any) -> None:
        self._monitor = monitor
        self._reading: Any = None
        self._served: set[str] = set()

    def value(self, rail: str) -> float | None:
        """The rail's cumulative mJ (None: the chip has no such channel). Raises what the
        library raises (the energy reader records a gap)."""
        if self._reading is None or rail in self._served:
            self._reading = self._monitor.get_cumulative_energy()
            self._served.clear()
        self._served.add(rail)
        found = getattr(self._reading, RAILS[rail][0], None)
        return float(found) if isinstance(found, int | float) else None

    def raw(self) -> dict[str, Any]:
        """The last reading's fields by name (lists for per-core fields)."""
        names = ("cpu_total_mj", "efficiency_cores_mj", "performance_cores_mj",
                 "efficiency_cluster_mj", "performance_cluster_mj", "dram_mj", "gpu_mj",
                 "gpu_sram_mj", "ane_mj")
        return {n: getattr(self._reading, n, None) for n in names}


class AppleRailSource:
    """One rail's cumulative energy (mJ) as an energy-reader COUNTER source.

    cpu_busy: the machine's CPU busy % since its previous call (None: unknown), asked when the
    CPU counter did not move; the reading is then None (a gap, unavailable) once the counter
    has stood still for FROZEN_SPAN_S or more while the CPU was at least FROZEN_BUSY_PERCENT
    busy. `last_reason` says why the last reading was set aside."""

    def __init__(self, rail: str, shared: CumulativeReader,
                 cpu_busy: Callable[[], float | None] | None = None,
                 clock: Callable[[], int] = time.perf_counter_ns) -> None:
        field, covers = RAILS[rail]
        self.info = SourceInfo(f"apple:{rail}", Kind.COUNTER,
                               Role.GPU if rail == "gpu" else Role.SUBDOMAIN, "mJ", 1e-3,
                               covers, True, resolution_j=1e-3, path=f"{LIBRARY}.{field}")
        self.rail = rail
        self._shared = shared
        self._cpu_busy = cpu_busy
        self._clock = clock
        self._still_since: tuple[int, float] | None = None  # (stamp, value) it stopped at
        self.last_reason: str | None = None

    def read(self) -> tuple[float, float | None] | None:
        """(cumulative mJ, None), or None: no channel, or a stalled CPU counter."""
        value = self._shared.value(self.rail)
        self.last_reason = None
        if value is None:
            self.last_reason = f"no {self.rail} channel on this chip"
            return None
        if self.rail == "cpu" and self._stalled(value):
            return None
        return value, None

    def _stalled(self, value: float) -> bool:
        now = self._clock()
        if self._still_since is None or self._still_since[1] != value:
            self._still_since = (now, value)
            return False
        still_s = (now - self._still_since[0]) / 1e9
        busy = self._cpu_busy() if self._cpu_busy is not None else None
        if still_s < FROZEN_SPAN_S or busy is None or busy < FROZEN_BUSY_PERCENT:
            return False
        self.last_reason = (f"the CPU energy counter stood at {value:.0f} mJ for {still_s:.1f} s "
                            f"while the CPU was {busy:.0f} % busy: a stalled IOReport channel "
                            "(macOS 27), unavailable, not 0 J")
        return True


def psutil_cpu_busy() -> Callable[[], float | None]:
    """A `cpu_busy` for AppleRailSource: psutil's machine CPU % since its previous call."""
    import psutil

    psutil.cpu_percent(None)  # the first call only starts the window
    return lambda: float(psutil.cpu_percent(None))


def discover_apple(lib: Any | None = None, system: str = sys.platform,
                   machine: str | None = None,
                   cpu_busy: Callable[[], float | None] | None = None,
                   clock: Callable[[], int] = time.perf_counter_ns,
                   ) -> tuple[list[AppleRailSource], str | None]:
    """One source per rail the chip reports, and None; or no sources and the reason. `lib`:
    the zeus_apple_silicon module (default: imported on macOS arm64 only; tests pass a fake);
    cpu_busy, clock: as AppleRailSource takes them (default: psutil's CPU %, perf_counter_ns).
    A rail whose first reading is None is not a source (the chip has no such channel).
    Never raises."""
    if lib is None:
        lib, why = load_library(system, machine)
        if lib is None:
            return [], why
    try:
        shared = CumulativeReader(lib.AppleEnergyMonitor())
        first = {rail: shared.value(rail) for rail in RAILS}
    except Exception as exc:  # noqa: BLE001 - IOReport refused: a reason, not a crash
        return [], f"Apple: IOReport energy could not be read: {type(exc).__name__}: {exc}"
    busy = cpu_busy if cpu_busy is not None else psutil_cpu_busy()
    rails = [AppleRailSource(r, shared, busy, clock) for r, v in first.items() if v is not None]
    if not rails:
        return [], "Apple: IOReport gave no CPU, GPU, ANE or DRAM energy channel"
    return rails, None


def rail_power_w(before: tuple[int, float], after: tuple[int, float]) -> float | None:
    """Mean power between two cumulative readings (perf_counter ns, mJ), W: ΔmJ / 1000 over
    the time that really passed between the reads. None when the time did not advance or the
    counter went backwards."""
    seconds = (after[0] - before[0]) / 1e9
    used_mj = after[1] - before[1]
    if seconds <= 0 or used_mj < 0:
        return None
    return used_mj / 1000.0 / seconds
