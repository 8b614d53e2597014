"""What the machine's speed was over one request, read without privileges.

Taken right before and right after each bench request (outside its timed span): CPU steal
(`system.steal_seconds`), each core's clock (`system.core_frequencies`), cgroup CPU
throttling (`cgroup.read_throttling`), GPU clocks and throttle reasons (`GpuProbe.clocks`),
and the throttles seen (`thermal.Throttle`: NVML's power and thermal reasons, thermal zones
at a trip point, hwmon temperatures at their limit).
`interval(before, after)` turns two readings into the figures of the span between them.
A reading the platform cannot give is None or empty, never a made-up 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from llmtop.probes.cgroup import Throttling, read_throttling
from llmtop.probes.gpu import GpuClocks, GpuProbe
from llmtop.probes.system import core_frequencies, steal_seconds
from llmtop.probes.thermal import ThermalReader, Throttle, gpu_throttles, merge_throttles


@dataclass(frozen=True, slots=True)
class MachineReading:
    """One reading: t_ns (`perf_counter_ns`), steal / total CPU seconds since boot, each
    core's clock (MHz), cgroup throttling counters, GPU clocks, the throttles seen."""

    t_ns: int
    steal: tuple[float, float] | None
    freq_mhz: tuple[float | None, ...]
    throttling: Throttling | None
    gpu: tuple[GpuClocks, ...]
    throttles: tuple[Throttle, ...] = ()


@dataclass(frozen=True, slots=True)
class MachineInterval:
    """The machine over the span between two readings.

    seconds: its length. steal_percent: share of all CPU time the hypervisor gave other
    guests, 0–100 % (None: no steal counter or no CPU time passed). freq_mhz: each core's
    clock at the end. throttled_ms / throttled_periods: how long and in how many periods the
    cgroups' CPU quota held tasks back (None: no cpu.stat). gpu: clocks at the end.
    throttle: the throttles seen at either end (a power cap or a thermal limit; empty: none
    seen, or nothing to read them from).
    """

    seconds: float
    steal_percent: float | None
    freq_mhz: tuple[float | None, ...]
    throttled_ms: float | None
    throttled_periods: int | None
    gpu: tuple[GpuClocks, ...]
    throttle: tuple[Throttle, ...] = ()


class MachineReader:
    """Takes `MachineReading`s. pids: the engine's process ids (its cgroup's throttling is
    read too), a collection or a callable returning one. gpu: the probe for GPU clocks
    (None: a fresh `GpuProbe`). thermal: the thermal zones' and hwmon sensors' reader (None:
    a fresh `ThermalReader` of /sys/class). Never raises from `read()`."""

    def __init__(
        self,
        pids: Collection[int] | Callable[[], Collection[int]] = (),
        gpu: GpuProbe | None = None,
        thermal: ThermalReader | None = None,
    ) -> None:
        self._pids = pids
        self._gpu = gpu or GpuProbe()
        self._thermal = thermal or ThermalReader()

    def read(self) -> MachineReading:
        """Read everything now (a few file reads and NVML calls: about a millisecond)."""
        pids = self._pids() if callable(self._pids) else self._pids
        clocks = self._gpu.clocks()
        return MachineReading(
            t_ns=time.perf_counter_ns(),
            steal=steal_seconds(),
            freq_mhz=core_frequencies(),
            throttling=read_throttling(tuple(sorted(pids))),
            gpu=clocks,
            throttles=gpu_throttles(clocks) + self._thermal.read(),
        )


def interval(before: MachineReading, after: MachineReading) -> MachineInterval:
    """The figures of the span between two readings (see MachineInterval). Throttling is
    compared only when both readings read the same number of cgroups (an engine that
    started or ended in between changes the sum's meaning)."""
    steal = None
    if before.steal is not None and after.steal is not None:
        total = after.steal[1] - before.steal[1]
        ran = after.steal[0] - before.steal[0]
        # a steal counter that ran backwards (psutil #1210) measured nothing: absent, not
        # a negative share
        steal = 100.0 * ran / total if total > 0 and ran >= 0 else None
    ms = periods = None
    b, a = before.throttling, after.throttling
    if b is not None and a is not None and b.cgroups == a.cgroups:
        ms, periods = (a.throttled_ns - b.throttled_ns) / 1e6, a.periods - b.periods
    return MachineInterval(
        seconds=(after.t_ns - before.t_ns) / 1e9,
        steal_percent=steal,
        freq_mhz=after.freq_mhz,
        throttled_ms=ms,
        throttled_periods=periods,
        gpu=after.gpu,
        throttle=merge_throttles(before.throttles + after.throttles),
    )

