"""The measured engine's own energy on macOS: the kernel's per-process energy estimate,
`proc_pid_rusage(pid, RUSAGE_INFO_V6, …)`'s `ri_energy_nj` (macOS 13 and later), summed over
the engine's processes, as one energy-reader COUNTER source ("apple:engine").

No well-kept library gives this figure (psutil does not; PyPI's `libproc` was last released in
2015), so it is read here through ctypes on the system's libproc, the one place llmtop binds a
C function itself: darwin only, loaded on first use (`load_libproc`), never on Linux or
Windows. Any user may read their own processes' figure without root (Ollama.app, LM Studio,
llama-server and mlx_lm run as the user); another user's process refuses (EPERM) and is left
out, said in `last_reason`.

What the figure is: the kernel's estimate of the energy the process's CPU time cost, in nJ
(monitors that read it: a spin loop on one P-core reads ~3 W, sleep ~0 W); whether it carries
the process's GPU work is not documented, so it is called "the engine's processes' energy
(kernel estimate)", never the engine's whole share of the machine. `ri_billed_energy` is left
alone: it reads 0 or stands still on the Macs that recorded it.

Counting rule: the source keeps its own running total of the increments of the pids seen in
two reads running. A pid's first reading is its baseline, not energy the request used (a
runner started mid-run brings its whole past with it); a pid gone between reads loses its
last increment (said in `last_reason`); a counter that went backwards (a pid reused) restarts
that pid's baseline.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from collections.abc import Callable, Iterable

from llmtop.probes.energy.model import Kind, Role, SourceInfo

RUSAGE_INFO_V6 = 6  # <sys/resource.h>: the first version with ri_energy_nj (macOS 13)
LIBPROC = "/usr/lib/libproc.dylib"
NAME = "apple:engine"
PIDS_REFRESH_NS = 5_000_000_000  # the engine's pids are looked up again after this long
EnergyNj = Callable[[int], int | None]

_U64 = ctypes.c_uint64
# struct rusage_info_v6 (<sys/resource.h>, macOS 13 SDK): a uuid, then 56 uint64 fields
_V6_FIELDS = (
    "user_time", "system_time", "pkg_idle_wkups", "interrupt_wkups", "pageins", "wired_size",
    "resident_size", "phys_footprint", "proc_start_abstime", "proc_exit_abstime",
    "child_user_time", "child_system_time", "child_pkg_idle_wkups", "child_interrupt_wkups",
    "child_pageins", "child_elapsed_abstime", "diskio_bytesread", "diskio_byteswritten",
    "cpu_time_qos_default", "cpu_time_qos_maintenance", "cpu_time_qos_background",
    "cpu_time_qos_utility", "cpu_time_qos_legacy", "cpu_time_qos_user_initiated",
    "cpu_time_qos_user_interactive", "billed_system_time", "serviced_system_time",
    "logical_writes", "lifetime_max_phys_footprint", "instructions", "cycles",
    "billed_energy", "serviced_energy", "interval_max_phys_footprint", "runnable_time",
    "flags", "user_ptime", "system_ptime", "pinstructions", "pcycles", "energy_nj",
    "penergy_nj", "secure_time_in_system", "secure_ptime_in_system",
)


class RusageInfoV6(ctypes.Structure):
    """struct rusage_info_v6: ri_uuid[16], the named uint64 fields, ri_reserved[12] (the
    neural-footprint fields of later SDKs sit inside the reserved tail): 464 bytes."""

    _fields_ = [("ri_uuid", ctypes.c_uint8 * 16),
                *((f"ri_{name}", _U64) for name in _V6_FIELDS),
                ("ri_reserved", _U64 * 12)]


def load_libproc(system: str = sys.platform) -> tuple[Callable[[int], int | None] | None,
                                                       str | None]:
    """(energy_nj, None): a function giving one pid's ri_energy_nj (None: refused or gone),
    or (None, why): not macOS, or libproc would not load. Never raises."""
    if system != "darwin":
        return None, "per-process energy is read on macOS only (proc_pid_rusage)"
    try:
        lib = ctypes.CDLL(LIBPROC, use_errno=True)
        call = lib.proc_pid_rusage
    except (OSError, AttributeError) as exc:
        return None, f"libproc: {type(exc).__name__}: {exc}"
    call.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    call.restype = ctypes.c_int

    def energy_nj(pid: int) -> int | None:
        info = RusageInfoV6()
        if call(pid, RUSAGE_INFO_V6, ctypes.byref(info)) != 0:
            return None
        return int(info.ri_energy_nj)

    return energy_nj, None


class EngineEnergySource:
    """The engine's processes' cumulative energy (nJ), an energy-reader COUNTER source.

    pids: the measured engine's pids now (e.g. `Connection.engine_pids`, which names the relay
    in the path too; asked at most every PIDS_REFRESH_NS; this process's own pid is left
    out); energy_nj: one pid's ri_energy_nj or None (`load_libproc`'s; tests pass a fake
    replaying recorded values); clock: perf_counter ns. `read()` gives (running total nJ,
    None), or None when no pid could be read (a gap)."""

    def __init__(self, pids: Callable[[], Iterable[int]], energy_nj: EnergyNj,
                 clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self.info = SourceInfo(NAME, Kind.COUNTER, Role.SUBDOMAIN, "nJ", 1e-9,
                               "the engine's processes (macOS kernel estimate, "
                               "proc_pid_rusage ri_energy_nj)", True, resolution_j=1e-9,
                               path="libproc proc_pid_rusage RUSAGE_INFO_V6")
        self._pids = pids
        self._energy_nj = energy_nj
        self._clock = clock
        self._known: tuple[int, tuple[int, ...]] | None = None  # (looked up at, pids)
        self._last: dict[int, int] = {}
        self.total_nj = 0
        self.last_reason: str | None = None

    def _current_pids(self) -> tuple[int, ...]:
        now = self._clock()
        if self._known is None or now - self._known[0] >= PIDS_REFRESH_NS:
            # llmtop's own process is never the engine's (its probes' cost is not the engine's)
            self._known = (now, tuple(sorted(set(self._pids()) - {os.getpid()})))
        return self._known[1]

    def read(self) -> tuple[float, float | None] | None:
        """(the running total of the engine's pids' increments, nJ; None), or None when no
        engine pid is known or none could be read. Never raises."""
        pids = self._current_pids()
        now = {pid: nj for pid in pids if (nj := self._energy_nj(pid)) is not None}
        if not now:
            self.last_reason = ("no engine process found" if not pids else
                                f"proc_pid_rusage refused every engine pid {list(pids)}")
            return None
        gone = [pid for pid in self._last if pid not in now]
        for pid, nj in now.items():
            before = self._last.get(pid)
            if before is not None and nj >= before:
                self.total_nj += nj - before
        self._last = now
        self.last_reason = (f"engine pids {gone} ended or were refused since the last read: "
                            "their last increment is not counted") if gone else None
        return float(self.total_nj), None


def engine_source(pids: Callable[[], Iterable[int]], system: str = sys.platform,
                  energy_nj: EnergyNj | None = None,
                  clock: Callable[[], int] = time.perf_counter_ns,
                  ) -> tuple[EngineEnergySource | None, str | None]:
    """(the engine's energy source, None), or (None, why) off macOS or without libproc.
    energy_nj: a stand-in for libproc's reading (tests); clock: perf_counter ns."""
    if energy_nj is None:
        energy_nj, why = load_libproc(system)
        if energy_nj is None:
            return None, why
    return EngineEnergySource(pids, energy_nj, clock), None


__all__ = ["NAME", "RUSAGE_INFO_V6", "EngineEnergySource", "RusageInfoV6", "engine_source",
           "load_libproc"]
