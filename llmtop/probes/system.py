"""Whole-machine state: CPU, memory, swap, load, frequency, power — one psutil reading each.

Percentages are 0–100 of the whole machine unless named otherwise; sizes are bytes;
frequencies MHz. A value the platform cannot give is None, never a made-up 0.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import psutil


@dataclass(frozen=True, slots=True)
class SystemSample:
    """One reading of the machine.

    cpu_percent: busy share of all logical CPUs together, 0–100 %, since the probe's previous
        sample (psutil `cpu_percent(interval=None)`); None on a fresh probe's first sample
        ("warming up"), never a fake 0.0.
    per_cpu: busy % per logical CPU, same window; empty while warming up.
    load_avg_per_core: 1-minute load average / logical CPUs (1.0 = every core has one runnable
        task); None where the OS has no load average (Windows: psutil emulates it and reports
        0.0 for its first seconds, which would be a fake value).
    mem_total, mem_available: bytes (psutil `virtual_memory()`; "available" = what can be
        given to processes without swapping). mem_percent: used share, 0–100 %.
    swap_total, swap_used: bytes; swap_percent: 0–100 % (0.0 when there is no swap).
    cpu_freq_mhz, cpu_freq_max_mhz: current (mean over CPUs) and maximum clock; None when
        unknown (VMs and some ARM systems report nothing or a max of 0).
    on_battery: True on battery, False on mains, None when no battery is found or its state
        is unknown (desktops).
    logical_cpus: logical CPU count, the divisor that turns per-process % (100 = one core)
        into machine % (see `machine_percent`).
    steal_percent: share of CPU time the hypervisor gave to other guests since the previous
        sample (Linux `steal` in /proc/stat), 0–100 %; None where the OS has no such counter
        and while warming up. A VM's "noisy neighbour" that no process list can show.
    swap_in_bps, swap_out_bps: bytes/s swapped in / out since the previous sample (psutil
        `sin`/`sout`); None while warming up or where the OS does not count them.
    temperature_c, temperature_high_c: hottest sensor now and its "high" mark (°C, psutil
        `sensors_temperatures`); None where the OS exposes no sensors (VMs, macOS, Windows).
    """

    cpu_percent: float | None
    per_cpu: tuple[float, ...]
    load_avg_per_core: float | None
    mem_total: int
    mem_available: int
    mem_percent: float
    swap_total: int
    swap_used: int
    swap_percent: float
    cpu_freq_mhz: float | None
    cpu_freq_max_mhz: float | None
    on_battery: bool | None
    logical_cpus: int = 1
    steal_percent: float | None = None
    swap_in_bps: float | None = None
    swap_out_bps: float | None = None
    temperature_c: float | None = None
    temperature_high_c: float | None = None


def logical_cpus() -> int:
    """Logical CPU count (psutil, falling back to os.cpu_count(), at least 1)."""
    return psutil.cpu_count(logical=True) or os.cpu_count() or 1


def machine_percent(per_process_percent: float | None, cpus: int) -> float | None:
    """Per-process CPU % (psutil semantics, 100 = one full core) → % of the whole machine.

    >>> machine_percent(100.0, 4)
    25.0
    """
    if per_process_percent is None:
        return None
    return per_process_percent / max(cpus, 1)


class SystemProbe:
    """Takes `SystemSample`s. Not thread-safe; one sampler thread owns it.

    psutil keeps the previous CPU reading module-wide: another caller of
    `psutil.cpu_percent(None)` in the same process shortens this probe's window (the value
    stays a true average over the shorter window). This probe only adds its own "first call"
    bookkeeping, so its first sample is None rather than psutil's meaningless 0.0.
    """

    def __init__(self) -> None:
        self._primed = False
        self._cpus = logical_cpus()
        self._prev: tuple[int, Any, tuple[int, int] | None] | None = None  # (t_ns, cpu_times, sin/sout)

    def _rates(self) -> tuple[float | None, float | None, float | None]:
        """Steal % and swap-in/out bytes/s since the previous sample (None the first time)."""
        now = time.perf_counter_ns()
        try:
            times = psutil.cpu_times()
        except (OSError, RuntimeError):
            times = None
        swap = _swap_io()
        prev, self._prev = self._prev, (now, times, swap)
        if prev is None:
            return None, None, None
        t0, times0, swap0 = prev
        steal = None
        if times is not None and times0 is not None and hasattr(times, "steal"):
            total = sum(times) - sum(times0)
            steal = 100.0 * (times.steal - times0.steal) / total if total > 0 else None
        sin = sout = None
        seconds = (now - t0) / 1e9
        if swap is not None and swap0 is not None and seconds > 0:
            sin, sout = (swap[0] - swap0[0]) / seconds, (swap[1] - swap0[1]) / seconds
        return steal, sin, sout

    def sample(self) -> SystemSample:
        """Read the machine now. Raises only if psutil cannot read memory at all."""
        total = psutil.cpu_percent(interval=None)
        per_cpu = psutil.cpu_percent(interval=None, percpu=True)
        primed, self._primed = self._primed, True
        vm = psutil.virtual_memory()
        sw = _swap()
        freq, freq_max = _freq()
        steal, sin, sout = self._rates()
        temp, temp_high = _temperature()
        return SystemSample(
            cpu_percent=float(total) if primed else None,
            per_cpu=tuple(float(v) for v in per_cpu) if primed else (),
            load_avg_per_core=_load_per_core(self._cpus),
            mem_total=int(vm.total),
            mem_available=int(vm.available),
            mem_percent=float(vm.percent),
            swap_total=sw[0],
            swap_used=sw[1],
            swap_percent=sw[2],
            cpu_freq_mhz=freq,
            cpu_freq_max_mhz=freq_max,
            on_battery=_on_battery(),
            logical_cpus=self._cpus,
            steal_percent=steal,
            swap_in_bps=sin,
            swap_out_bps=sout,
            temperature_c=temp,
            temperature_high_c=temp_high,
        )


def _swap() -> tuple[int, int, float]:
    try:
        sw = psutil.swap_memory()
    except (OSError, RuntimeError):  # no /proc/swaps in some containers
        return 0, 0, 0.0
    return int(sw.total), int(sw.used), float(sw.percent)


def _swap_io() -> tuple[int, int] | None:
    try:
        sw = psutil.swap_memory()
    except (OSError, RuntimeError):
        return None
    return (int(sw.sin), int(sw.sout)) if sw.sin or sw.sout or sw.total else None


def _temperature() -> tuple[float | None, float | None]:
    """The hottest sensor's current reading and its "high" mark, in °C."""
    sensors = getattr(psutil, "sensors_temperatures", None)
    if sensors is None:
        return None, None
    try:
        readings = [t for group in (sensors() or {}).values() for t in group if t.current]
    except (OSError, RuntimeError, AttributeError):
        return None, None
    if not readings:
        return None, None
    hottest = max(readings, key=lambda t: t.current)
    return float(hottest.current), (float(hottest.high) if hottest.high else None)


def _load_per_core(cpus: int) -> float | None:
    if sys.platform == "win32" or not hasattr(os, "getloadavg"):
        return None
    try:
        one_min = os.getloadavg()[0]
    except OSError:
        return None
    return one_min / max(cpus, 1)


def _freq() -> tuple[float | None, float | None]:
    try:
        f = psutil.cpu_freq()
    except (OSError, RuntimeError, NotImplementedError, AttributeError):
        return None, None
    if f is None:
        return None, None
    current = float(f.current) if f.current and f.current > 0 else None
    maximum = float(f.max) if f.max and f.max > 0 else None
    return current, maximum


def _on_battery() -> bool | None:
    sensors = getattr(psutil, "sensors_battery", None)
    if sensors is None:
        return None
    try:
        battery = sensors()
    except (OSError, RuntimeError, NotImplementedError):
        return None
    if battery is None or battery.power_plugged is None:
        return None
    return not battery.power_plugged
