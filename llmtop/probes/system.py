"""Whole-machine state: CPU, memory, swap, load, frequency, power — one psutil reading each.

Percentages are 0–100 of the whole machine unless named otherwise; sizes are bytes;
frequencies MHz. A value the platform cannot give is None, never a made-up 0. Optional
readings (clock, battery, temperatures) that return None, 0, nothing, or raise are None.

In a container the machine is what its cgroup allows (`probes/cgroup.py`): with a CPU quota,
CPU % is the cgroup's usage over the quota and `logical_cpus` is the quota; with a memory
limit, total and available memory are the limit and what is left under it.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil

from llmtop.probes.cgroup import CgroupLimits, CgroupMeter, read_limits


@dataclass(frozen=True, slots=True)
class SystemSample:
    """One reading of the machine.

    cpu_percent: busy share of all logical CPUs together, 0–100 %, since the probe's previous
        sample (psutil's `cpu_percent` formula over the probe's own readings); None on a fresh
        probe's first sample ("warming up"), never a fake 0.0.
    per_cpu: busy % per logical CPU, same window; empty while warming up.
    load_avg_per_core: 1-minute load average / logical CPUs (1.0 = every core has one runnable
        task); None where the OS has no load average (Windows: psutil emulates it and reports
        0.0 for its first seconds, which would be a fake value).
    mem_total, mem_available: bytes (psutil `virtual_memory()`; "available" = what can be
        given to processes without swapping). mem_percent: used share, 0–100 %.
    swap_total, swap_used: bytes; swap_percent: 0–100 % (0.0 when there is no swap).
    cpu_freq_mhz, cpu_freq_max_mhz: current (mean over CPUs) and maximum clock; None when
        unknown (VMs and some ARM systems report nothing or a max of 0). Read at most every
        OPTIONAL_PERIOD_S seconds, as are on_battery and the temperatures.
    on_battery: True on battery, False on mains, None when no battery is found or its state
        is unknown (desktops).
    logical_cpus: CPUs this process may use (`cpu_capacity`: the logical CPU count lowered to
        its affinity and cgroup quota; may be fractional, 1.5), the divisor that turns
        per-process % (100 = one core) into machine % (see `machine_percent`).
    steal_percent: share of CPU time the hypervisor gave to other guests since the previous
        sample (Linux `steal` in /proc/stat), 0–100 %; None where the OS has no such counter
        and while warming up. A VM's "noisy neighbour" that no process list can show.
    swap_in_bps, swap_out_bps: bytes/s swapped in / out since the previous sample (psutil
        `sin`/`sout`); None while warming up or where the OS does not count them.
    temperature_c, temperature_high_c: hottest sensor now and its "high" mark (°C, psutil
        `sensors_temperatures`); None where the OS exposes no sensors (VMs, macOS, Windows).
    cpu_quota: the cgroup CPU quota in CPUs; memory_limit: the cgroup memory limit in bytes
        (both None outside a limited container; then mem_total is the host's).
    limit_problems: cgroup limit files that could not be parsed (`CgroupLimits.problems`).
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
    logical_cpus: float = 1
    steal_percent: float | None = None
    swap_in_bps: float | None = None
    swap_out_bps: float | None = None
    temperature_c: float | None = None
    temperature_high_c: float | None = None
    cpu_quota: float | None = None
    memory_limit: int | None = None
    limit_problems: tuple[str, ...] = ()


def logical_cpus() -> int:
    """Logical CPU count (psutil, falling back to os.cpu_count(), at least 1)."""
    return psutil.cpu_count(logical=True) or os.cpu_count() or 1


@functools.cache
def container_limits() -> CgroupLimits | None:
    """This process's cgroup limits, read once (`cgroup.read_limits`); None off Linux."""
    return read_limits()


def cpu_capacity(
    limits: CgroupLimits | None = None, cores: int | None = None, allowed: int | None = None
) -> float:
    """How many CPUs this process may use: `cores` (default `logical_cpus()`), lowered to
    `allowed`, the CPUs it may run on (default: its affinity / cpuset where the OS tells), and
    to the cgroup quota in `limits`. An int-valued result is returned as int (4, not 4.0)."""
    cap: float = cores if cores is not None else logical_cpus()
    if allowed is None and hasattr(os, "sched_getaffinity"):
        try:
            allowed = len(os.sched_getaffinity(0))
        except OSError:
            allowed = None
    if allowed:
        cap = min(cap, allowed)
    if limits is not None and limits.cpus is not None:
        cap = min(cap, limits.cpus)
    return int(cap) if float(cap).is_integer() else cap


def machine_percent(per_process_percent: float | None, cpus: float) -> float | None:
    """Per-process CPU % (psutil semantics, 100 = one full core) → % of the whole machine.

    >>> machine_percent(100.0, 4)
    25.0
    """
    if per_process_percent is None:
        return None
    return per_process_percent / max(cpus, 1)


OPTIONAL_PERIOD_S = 2.0  # clock, battery, temperatures: re-read at most this often


class _Every:
    """A reading taken at most every `period_s` seconds; in between, its last value.

    The optional readings change over seconds, not between two samples, and are the dearest
    part of a sample where they exist least: psutil's temperature read globs every hwmon and
    thermal directory (~0.25 ms on a VM that has none), its clock read /proc/cpuinfo
    (bench/probe_cost.py)."""

    def __init__(self, read: Callable[[], Any], period_s: float = OPTIONAL_PERIOD_S) -> None:
        self._read = read
        self._period_ns = int(period_s * 1e9)
        self._t_ns: int | None = None
        self._value: Any = None

    def get(self, now_ns: int) -> Any:
        """The value, read again when `period_s` has passed since the last read."""
        if self._t_ns is None or now_ns - self._t_ns >= self._period_ns:
            self._value, self._t_ns = self._read(), now_ns
        return self._value


class SystemProbe:
    """Takes `SystemSample`s. Not thread-safe; one sampler thread owns it.

    One sample reads /proc/stat once (`psutil.cpu_times(percpu=True)`: CPU %, per-CPU % and
    steal all come from the difference to the probe's own previous reading, so no other
    caller of psutil's module-wide `cpu_percent` shortens this probe's window), memory and
    swap once each, and the optional readings (clock, battery, temperatures) at most every
    OPTIONAL_PERIOD_S seconds.
    """

    def __init__(
        self,
        limits: CgroupLimits | None | Callable[[], CgroupLimits | None] = container_limits,
    ) -> None:
        """limits: the cgroup limits to apply (default: this process's; None: none)."""
        self._limits = limits() if callable(limits) else limits
        self._meter = CgroupMeter(self._limits) if self._limits is not None else None
        self._cpus = cpu_capacity(self._limits)
        self._prev: tuple[int, list[Any] | None, tuple[int, int] | None] | None = None
        self._freq = _Every(_freq)
        self._battery = _Every(_on_battery)
        self._temperature = _Every(_temperature)

    def _rates(self, now: int, per_cpu: list[Any] | None, swap: tuple[int, int] | None
               ) -> tuple[float | None, tuple[float, ...], float | None, float | None,
                          float | None]:
        """(CPU %, per-CPU %, steal %, swap-in, swap-out bytes/s) since the previous sample;
        (None, (), None, None, None) the first time."""
        prev, self._prev = self._prev, (now, per_cpu, swap)
        if prev is None:
            return None, (), None, None, None
        t0, per0, swap0 = prev
        total = busy = steal = None
        shares: tuple[float, ...] = ()
        if per_cpu is not None and per0 is not None and len(per0) == len(per_cpu):
            shares = tuple(_busy_percent(a, b) for a, b in zip(per0, per_cpu, strict=True))
            before, after = _summed(per0), _summed(per_cpu)
            total = sum(_deltas(before, after).values())
            busy = _busy_percent(before, after)
            # a steal counter that ran backwards measured nothing: absent, not 0 %
            if hasattr(after, "steal") and total > 0 and after.steal >= before.steal:
                steal = 100.0 * (after.steal - before.steal) / total
        sin = sout = None
        seconds = (now - t0) / 1e9
        if swap is not None and swap0 is not None and seconds > 0:
            sin, sout = (swap[0] - swap0[0]) / seconds, (swap[1] - swap0[1]) / seconds
        return busy, shares, steal, sin, sout

    def sample(self) -> SystemSample:
        """Read the machine now. Raises only if psutil cannot read memory at all."""
        now = time.perf_counter_ns()
        primed = self._prev is not None
        sw = _swap()
        total, per_cpu, steal, sin, sout = self._rates(now, _per_cpu_times(), sw[3])
        if self._meter is not None and self._meter.limits.cpus is not None:
            quota_percent = self._meter.cpu_percent()  # None: first call or counter unreadable
            total = quota_percent if quota_percent is not None and primed else total
        mem_total, mem_available, mem_percent = self._memory()
        freq, freq_max = self._freq.get(now)
        temp, temp_high = self._temperature.get(now)
        return SystemSample(
            cpu_percent=total,
            per_cpu=per_cpu,
            load_avg_per_core=_load_per_core(self._cpus),
            mem_total=mem_total,
            mem_available=mem_available,
            mem_percent=mem_percent,
            swap_total=sw[0],
            swap_used=sw[1],
            swap_percent=sw[2],
            cpu_freq_mhz=freq,
            cpu_freq_max_mhz=freq_max,
            on_battery=self._battery.get(now),
            logical_cpus=self._cpus,
            steal_percent=steal,
            swap_in_bps=sin,
            swap_out_bps=sout,
            temperature_c=temp,
            temperature_high_c=temp_high,
            cpu_quota=self._limits.cpus if self._limits else None,
            memory_limit=self._limits.memory_bytes if self._limits else None,
            limit_problems=self._limits.problems if self._limits else (),
        )

    def _memory(self) -> tuple[int, int, float]:
        """(total, available, used %): the host's, or the cgroup limit and what is left of it
        (never more than the host has available)."""
        vm = psutil.virtual_memory()
        total, available = int(vm.total), int(vm.available)
        limit = self._limits.memory_bytes if self._limits is not None else None
        if limit is not None and limit < total and self._meter is not None:
            used = self._meter.memory_used()
            total = limit
            left = limit - used if used is not None else limit
            available = min(available, max(0, left))
            return total, available, 100.0 * (total - available) / total
        return total, available, float(vm.percent)


def _per_cpu_times() -> list[Any] | None:
    """Each logical CPU's cumulative times (psutil `cpu_times(percpu=True)`: one read of
    /proc/stat on Linux); None when unreadable."""
    try:
        return list(psutil.cpu_times(percpu=True))
    except (OSError, RuntimeError):
        return None


def _summed(per_cpu: list[Any]) -> Any:
    """The machine's times: the per-CPU times added field by field (the kernel's own "cpu"
    line of /proc/stat is that sum)."""
    return type(per_cpu[0])(*(sum(field) for field in zip(*per_cpu, strict=True)))


def _deltas(before: Any, after: Any) -> dict[str, float]:
    """Each cpu_times field's change between two readings (seconds); a counter that went
    backwards counts 0. Under some hypervisors the steal counter runs backwards (psutil
    #1210, node_exporter #742): summed with the rest, its drop swallowed the interval's other
    time and read as CPU 0 %; field by field, only that field is set aside."""
    return {name: max(0.0, float(a) - float(b))
            for name, a, b in zip(after._fields, after, before, strict=True)}


def _busy_percent(before: Any, after: Any) -> float:
    """Busy share of the time between two cpu_times readings, 0-100 %: psutil's own formula
    (`psutil.cpu_percent`): all time less guest time (Linux counts it inside user and nice
    already), busy = that less idle and iowait; a field whose counter went backwards counts 0
    (`_deltas`), and no time passed reads 0."""
    d = _deltas(before, after)
    all_delta = sum(d.values()) - d.get("guest", 0.0) - d.get("guest_nice", 0.0)
    if all_delta <= 0:
        return 0.0
    busy_delta = all_delta - d["idle"] - d.get("iowait", 0.0)
    return min(100.0, max(0.0, 100.0 * busy_delta / all_delta))


def _swap() -> tuple[int, int, float, tuple[int, int] | None]:
    """(total, used bytes, used %, (swapped-in, swapped-out bytes since boot) or None where
    the OS does not count them): one psutil `swap_memory()` read."""
    try:
        sw = psutil.swap_memory()
    except (OSError, RuntimeError):  # no /proc/swaps in some containers
        return 0, 0, 0.0, None
    io = (int(sw.sin), int(sw.sout)) if sw.sin or sw.sout or sw.total else None
    return int(sw.total), int(sw.used), float(sw.percent), io


def _optional(read: Callable[[], Any]) -> Any:
    """An optional reading (clock, battery, sensors): any failure is "not available" (None).
    These sensors differ per OS and driver and raise all kinds of errors; none is worth a crash
    or a finding."""
    try:
        return read()
    except Exception:  # noqa: BLE001 - see the docstring
        return None


def _temperature() -> tuple[float | None, float | None]:
    """The hottest sensor's current reading and its "high" mark, in °C; (None, None) when no
    sensor reads above 0."""
    groups = _optional(getattr(psutil, "sensors_temperatures", lambda: None))
    readings = _optional(
        lambda: [t for ts in (groups or {}).values() for t in ts if t.current and t.current > 0]
    )
    if not readings:
        return None, None
    hottest = max(readings, key=lambda t: t.current)
    high = getattr(hottest, "high", None)
    return float(hottest.current), (float(high) if high and high > 0 else None)


def _load_per_core(cpus: float) -> float | None:
    if sys.platform == "win32" or not hasattr(os, "getloadavg"):
        return None
    try:
        one_min = os.getloadavg()[0]
    except OSError:
        return None
    return one_min / max(cpus, 1)


def _freq() -> tuple[float | None, float | None]:
    """(current, max) clock in MHz; None for a missing, zero or unreadable figure."""
    f = _optional(psutil.cpu_freq) if hasattr(psutil, "cpu_freq") else None
    current, maximum = (getattr(f, "current", None), getattr(f, "max", None)) if f else (None, None)
    return _positive(current), _positive(maximum)


def _positive(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        return None
    return float(value)


def _on_battery() -> bool | None:
    """True on battery, False on mains, None without a battery or when its state is unknown."""
    battery = _optional(getattr(psutil, "sensors_battery", lambda: None))
    plugged = getattr(battery, "power_plugged", None)
    return None if plugged is None else not plugged


def core_frequencies() -> tuple[float | None, ...]:
    """Each logical CPU's current clock in MHz, now (psutil `cpu_freq(percpu=True)`: Linux
    cpufreq files, else /proc/cpuinfo "cpu MHz"); a core whose figure is missing or 0 is None;
    empty where the OS gives no per-core figure (macOS, many VMs). No privileges needed."""
    if not hasattr(psutil, "cpu_freq"):
        return ()
    cores = _optional(lambda: psutil.cpu_freq(percpu=True)) or []
    return tuple(_positive(getattr(c, "current", None)) for c in cores)


def steal_seconds() -> tuple[float, float] | None:
    """(steal, total) CPU seconds over all CPUs since boot (psutil `cpu_times()`; Linux
    `steal` in /proc/stat: time the hypervisor ran other guests while this one had work). The
    change between two readings gives the steal share of that interval. None where the OS
    has no steal counter."""
    times = _optional(psutil.cpu_times)
    if times is None or not hasattr(times, "steal"):
        return None
    return float(times.steal), float(sum(times))
