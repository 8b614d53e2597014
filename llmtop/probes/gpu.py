"""GPU state of every vendor: NVIDIA through NVML (`pynvml`, package nvidia-ml-py), AMD and
Intel from the kernel's files (`gpu_sysfs`), in one shape (`GpuDevice`); absent is a normal
state.

The source method logged `nvidia-smi --query-gpu=utilization.gpu,memory.used,memory.total`
every second and said which tool each VRAM figure came from; `GpuSample.source` records that
("nvml"). No GPU, no driver or no library gives `GpuSample(available=False, reason=...)`,
never an exception. NVML is initialised once per process and left initialised (nvmlInit is
reference-counted and cheap to keep); repeat samples reuse the device handles, and what
cannot change while the driver is loaded (a board's name and clock limits) is read once per
device: on an H200 (driver 580.159, bench/gpu_check.py) one `nvmlDeviceGetMaxClockInfo`
cost 1.5 ms of CPU against 2-10 µs for each live figure, so a sample that re-read both
limits cost 3.1 ms where the live figures cost about 0.06 ms.

Utilisation 100 % is busy time, not efficiency (docs/method.md, "GPU utilisation"), not "cannot go
faster".
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmtop.probes.gpu_sysfs import DRM_ROOT, CardReader, DrmCard, Reading, find_cards

SOURCE = "nvml"
SYSFS = "sysfs"

# NVML's clock-event ("throttle") reason bits, nvml.h `nvmlClocksEventReason*`, as data.
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal_slowdown"),
    (0x040, "hw_thermal_slowdown"),
    (0x080, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)


def decode_throttle(mask: int) -> tuple[str, ...]:
    """NVML clock-event bitmask → reason names, in bit order (0 → empty tuple)."""
    return tuple(name for bit, name in THROTTLE_REASONS if mask & bit)


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process using a GPU: pid and its GPU memory in bytes (None: NVML cannot tell,
    e.g. Windows WDDM or a container without the pid namespace)."""

    pid: int
    used_memory_bytes: int | None


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One GPU of any vendor, the same shape whether NVML or the kernel's files
    (`gpu_sysfs`) filled it; None where the board or driver does not give a figure (never 0).

    util_percent / mem_util_percent: % of the last sample period the GPU / memory controller
    was busy (NVML utilisation rates; amdgpu's gpu_busy_percent); util_reason: why
    util_percent is None (Intel: only a privileged PMU counts it; a sleeping GPU).
    memory_used / memory_total: VRAM bytes. temperature_c: core °C. clock_*_mhz: current
    graphics/memory clocks; *_max_mhz: limits. throttle_reasons: active clock-event reasons
    (`THROTTLE_REASONS` names). power_w: board power draw in watts; power_from: which
    reading gave it ("power1_average", "energy1_input over 1.0 s"; None for NVML's
    nvmlDeviceGetPowerUsage). energy_j: the board's cumulative energy counter in J (hwmon
    energy1_input; None from NVML, whose counter the energy reader reads). vendor: "NVIDIA",
    "AMD", "Intel"; driver: the kernel driver ("nvidia", "amdgpu", "i915", "xe"); source:
    "nvml" or "sysfs"; card: the DRM card ("card1") for sysfs devices. asleep: the device was
    runtime-suspended and not woken to read it. notes: why figures are missing or set aside.
    thermal_state: the machine's thermal pressure in NSProcessInfo.thermalState's words
    ("nominal", "fair", "serious", "critical"; Apple Silicon, whose GPU shares the SoC's
    heat); rails_w: the SoC's power per rail in W ({"cpu": 6.0, "gpu": 12.0, "dram": 2.0};
    Apple Silicon's IOReport energy over the real window); None where not read.
    """

    index: int
    name: str | None
    util_percent: float | None
    mem_util_percent: float | None
    memory_used: int | None
    memory_total: int | None
    temperature_c: float | None
    clock_graphics_mhz: int | None
    clock_memory_mhz: int | None
    clock_graphics_max_mhz: int | None
    clock_memory_max_mhz: int | None
    throttle_reasons: tuple[str, ...] | None
    power_w: float | None
    processes: tuple[GpuProcess, ...]
    vendor: str | None = "NVIDIA"
    driver: str | None = "nvidia"
    source: str = SOURCE
    card: str | None = None
    util_reason: str | None = None
    power_from: str | None = None
    energy_j: float | None = None
    asleep: bool = False
    notes: tuple[str, ...] = ()
    thermal_state: str | None = None
    rails_w: dict[str, float] | None = None


@dataclass(frozen=True, slots=True)
class GpuSample:
    """All GPUs: `available` False (with a human `reason`) when NVML cannot be used."""

    available: bool
    reason: str | None = None
    source: str = SOURCE
    driver_version: str | None = None
    devices: tuple[GpuDevice, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuClocks:
    """One GPU's clocks now (NVML), the light reading taken around every bench request.

    graphics_mhz / sm_mhz / memory_mhz: current clocks; throttle_reasons: active clock-event
    reasons (`THROTTLE_REASONS` names; empty: none). None where the board does not say.
    """

    index: int
    graphics_mhz: int | None
    sm_mhz: int | None
    memory_mhz: int | None
    throttle_reasons: tuple[str, ...] | None


_init_lock = threading.Lock()
# library object (the pynvml module, or a test's stand-in) → None (ready) or the failure reason
_init_result: dict[Any, str | None] = {}


def _load_pynvml() -> Any:
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


NO_DRIVER = "no NVIDIA driver"  # how a failed nvmlInit that found no library is said
LIBRARY_MISSING = ("Shared Library Not Found", "cannot open shared object", "cannot open")


def init_failure(error: str) -> str:
    """nvmlInit's error in words: "no NVIDIA driver (NVML's library is not on this machine)"
    when the library is missing (NVML_ERROR_LIBRARY_NOT_FOUND, or the loader's "cannot open"):
    a normal state on a machine without an NVIDIA GPU, not an error to show raw; else
    "NVML unavailable: " + the error (a driver not loaded, no permission)."""
    if any(mark in error for mark in LIBRARY_MISSING):
        return f"{NO_DRIVER} (NVML's library is not on this machine)"
    return f"NVML unavailable: {error}"


def _init_once(lib: Any) -> str | None:
    """nvmlInit() once per library object; the failure reason, or None when ready."""
    with _init_lock:
        if lib not in _init_result:
            try:
                lib.nvmlInit()
                _init_result[lib] = None
            except _errors(lib) as exc:  # library not found, driver not loaded, no permission
                _init_result[lib] = init_failure(_text(exc) or type(exc).__name__)
        return _init_result[lib]


def _errors(lib: Any) -> tuple[type[BaseException], ...]:
    """What an NVML call may raise: pynvml's NVMLError (and its per-code subclasses), plus
    OSError/AttributeError for a broken or too-old library (a missing function)."""
    nvml_error = getattr(lib, "NVMLError", None)
    extra = (nvml_error,) if isinstance(nvml_error, type) else ()
    return (*extra, OSError, AttributeError, TypeError, ValueError)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


class GpuProbe:
    """Takes `GpuSample`s: NVML's GPUs, then the AMD and Intel GPUs (and an NVIDIA card NVML
    did not list) from the kernel's files under `drm_root` (`gpu_sysfs`; True: /sys/class/drm
    unless a stand-in `nvml` was given, so a test's NVML is exact; None or False: none).
    `nvml`: the pynvml module (default: imported if installed); tests pass a stand-in.
    Never raises from `sample()`."""

    def __init__(self, nvml: Any | None = None, drm_root: Path | None | bool = True) -> None:
        self._drm_root = (drm_root if not isinstance(drm_root, bool)
                          else DRM_ROOT if drm_root and nvml is None else None)
        self._drm: list[CardReader] | None = None
        self._lib = nvml if nvml is not None else _load_pynvml()
        self._handles: list[Any] | None = None
        self._static: list[tuple[str | None, int | None, int | None]] = []  # name, max clocks
        self._driver: str | None = None
        self._reason: str | None = None
        self._errors = _errors(self._lib)

    def _setup(self) -> str | None:
        if self._handles is not None or self._reason is not None:
            return self._reason
        if self._lib is None:
            self._reason = "pynvml (nvidia-ml-py) is not installed"
            return self._reason
        reason = _init_once(self._lib)
        if reason is not None:
            self._reason = reason
            return reason
        try:
            count = int(self._lib.nvmlDeviceGetCount())
            self._handles = [self._lib.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except _errors(self._lib) as exc:
            self._reason = f"NVML device query failed: {_text(exc)}"
            return self._reason
        if not self._handles:
            self._reason = "no NVIDIA GPU found"
            return self._reason
        self._driver = self._call_text("nvmlSystemGetDriverVersion")
        g_clock, m_clock = self._clock_kinds()
        self._static = [
            (self._call_text("nvmlDeviceGetName", h),
             _int(self._call("nvmlDeviceGetMaxClockInfo", h, g_clock)),
             _int(self._call("nvmlDeviceGetMaxClockInfo", h, m_clock)))
            for h in self._handles
        ]
        return None

    def _clock_kinds(self) -> tuple[Any, Any]:
        lib = self._lib
        return getattr(lib, "NVML_CLOCK_GRAPHICS", 0), getattr(lib, "NVML_CLOCK_MEM", 2)

    def sample(self) -> GpuSample:
        """Read every GPU now; `available=False` with NVML's reason when no GPU of any
        vendor was found. `source` says which readers gave devices ("nvml", "sysfs",
        "nvml+sysfs")."""
        reason = self._setup()
        nvml: tuple[GpuDevice, ...] = ()
        if reason is None and self._handles is not None:
            nvml = tuple(self._device(i, h) for i, h in enumerate(self._handles))
        kernel = tuple(_sysfs_device(r.card, r.read(), reason) for r in self._sysfs_readers()
                       if r.card.driver in SYSFS_DRIVERS
                       or (r.card.vendor == "NVIDIA" and not nvml))
        if not nvml and not kernel:
            return GpuSample(available=False, reason=reason)
        source = "+".join(name for name, got in ((SOURCE, nvml), (SYSFS, kernel)) if got)
        return GpuSample(available=True, source=source, driver_version=self._driver,
                         devices=nvml + kernel)

    def _sysfs_readers(self) -> list[CardReader]:
        """The DRM cards' readers, found on the first sample (cards do not come and go
        while a measurement runs)."""
        if self._drm is None:
            cards = find_cards(self._drm_root) if self._drm_root is not None else ()
            self._drm = [CardReader(c) for c in cards]
        return self._drm

    def clocks(self) -> tuple[GpuClocks, ...]:
        """Every GPU's clocks and throttle reasons now: a few NVML calls per device, no
        process listing. Empty when NVML cannot be used (no GPU is a normal state)."""
        if self._setup() is not None or self._handles is None:
            return ()
        lib = self._lib
        kinds = [getattr(lib, name, default) for name, default in
                 (("NVML_CLOCK_GRAPHICS", 0), ("NVML_CLOCK_SM", 1), ("NVML_CLOCK_MEM", 2))]
        out = []
        for i, h in enumerate(self._handles):
            g, sm, mem = (_int(self._call("nvmlDeviceGetClockInfo", h, k)) for k in kinds)
            out.append(GpuClocks(i, g, sm, mem, self._throttle(h)))
        return tuple(out)

    def _throttle(self, h: Any) -> tuple[str, ...] | None:
        mask = self._call("nvmlDeviceGetCurrentClocksEventReasons", h)
        if mask is None:
            mask = self._call("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        return decode_throttle(int(mask)) if mask is not None else None

    def _call(self, fn: str, *args: Any) -> Any:
        try:
            return getattr(self._lib, fn)(*args)
        except self._errors:  # NVMLError_NotSupported and friends: this figure is unknown
            return None

    def _call_text(self, fn: str, *args: Any) -> str | None:
        value = self._call(fn, *args)
        return None if value is None else _text(value)

    def _device(self, index: int, h: Any) -> GpuDevice:
        lib = self._lib
        util = self._call("nvmlDeviceGetUtilizationRates", h)
        mem = self._call("nvmlDeviceGetMemoryInfo", h)
        temp = self._call("nvmlDeviceGetTemperature", h, getattr(lib, "NVML_TEMPERATURE_GPU", 0))
        g_clock, m_clock = self._clock_kinds()
        name, g_max, m_max = self._static[index]
        power_mw = self._call("nvmlDeviceGetPowerUsage", h)
        return GpuDevice(
            index=index,
            name=name,
            util_percent=_num(getattr(util, "gpu", None)),
            mem_util_percent=_num(getattr(util, "memory", None)),
            memory_used=_int(getattr(mem, "used", None)),
            memory_total=_int(getattr(mem, "total", None)),
            temperature_c=_num(temp),
            clock_graphics_mhz=_int(self._call("nvmlDeviceGetClockInfo", h, g_clock)),
            clock_memory_mhz=_int(self._call("nvmlDeviceGetClockInfo", h, m_clock)),
            clock_graphics_max_mhz=g_max,
            clock_memory_max_mhz=m_max,
            throttle_reasons=self._throttle(h),
            power_w=power_mw / 1000.0 if isinstance(power_mw, int | float) else None,
            processes=self._processes(h),
        )

    def _processes(self, h: Any) -> tuple[GpuProcess, ...]:
        seen: dict[int, GpuProcess] = {}
        for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            for p in self._call(fn, h) or ():
                pid = _int(getattr(p, "pid", None))
                if pid is not None and pid not in seen:
                    seen[pid] = GpuProcess(pid, _int(getattr(p, "usedGpuMemory", None)))
        return tuple(sorted(seen.values(), key=lambda p: p.pid))


def device_dict(d: GpuDevice) -> dict[str, Any]:
    """One GPU as a JSON-ready dict in the vendor-neutral shape (`preflight --json`'s `gpus`,
    `--version -v`): busy_percent with busy_reason when null, VRAM in bytes, power in W
    (power_from: which reading), energy_j (the board's counter, J), temp_c, clocks in MHz,
    thermal_state and rails_w (W per SoC rail; Apple Silicon, None elsewhere)."""
    return {
        "index": d.index, "card": d.card, "name": d.name, "vendor": d.vendor,
        "driver": d.driver, "source": d.source,
        "busy_percent": d.util_percent, "busy_reason": d.util_reason,
        "vram_used_bytes": d.memory_used, "vram_total_bytes": d.memory_total,
        "power_w": None if d.power_w is None else round(d.power_w, 3),
        "power_from": d.power_from, "energy_j": d.energy_j, "temp_c": d.temperature_c,
        "clock_graphics_mhz": d.clock_graphics_mhz, "clock_memory_mhz": d.clock_memory_mhz,
        "asleep": d.asleep, "notes": list(d.notes), "thermal_state": d.thermal_state,
        "rails_w": None if d.rails_w is None else {k: round(v, 3) for k, v in d.rails_w.items()},
    }


# Kernel drivers of compute GPUs read through sysfs. A virtual or server-management display
# (virtio_gpu, bochs, simpledrm, ast, mgag200) is a DRM card too but runs no model.
SYSFS_DRIVERS = frozenset({"amdgpu", "i915", "xe"})


def _sysfs_device(card: DrmCard, r: Reading, nvml_reason: str | None) -> GpuDevice:
    """One card's `Reading` in the vendor-neutral shape. An NVIDIA card here is one NVML did
    not list: its figures are NVML's, so busy % is n/a with NVML's reason."""
    util_reason = r.busy_reason
    if card.vendor == "NVIDIA":
        util_reason = f"NVIDIA figures come from NVML: {nvml_reason or 'not listed by NVML'}"
    return GpuDevice(
        index=card.index, name=card.name, util_percent=r.busy_percent, mem_util_percent=None,
        memory_used=r.vram_used, memory_total=r.vram_total, temperature_c=r.temp_c,
        clock_graphics_mhz=r.sclk_mhz, clock_memory_mhz=r.mclk_mhz,
        clock_graphics_max_mhz=None, clock_memory_max_mhz=None, throttle_reasons=None,
        power_w=r.power_w, processes=(), vendor=card.vendor, driver=card.driver,
        source=SYSFS, card=card.card, util_reason=util_reason, power_from=r.power_from,
        energy_j=r.energy_j, asleep=r.asleep, notes=tuple(r.notes))


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None
