"""GPU probe: NVML figures mapped with units; absence is a normal state, never an exception.

A stand-in for the pynvml module drives the mapping (no GPU on the test machine is the usual
case); one test runs the real library, whatever the machine has.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from llmtop.probes.gpu import GpuDevice, GpuProbe, GpuProcess, GpuSample, decode_throttle

GIB = 1024**3


class NVMLError(Exception):
    pass


class FakeNvml:
    """Just the pynvml functions GpuProbe calls, for one GPU."""

    NVMLError = NVMLError
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_GRAPHICS = 0
    NVML_CLOCK_MEM = 2

    def __init__(self, count: int = 1, init_error: Exception | None = None) -> None:
        self.count = count
        self.init_error = init_error
        self.init_calls = 0

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            raise self.init_error

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"h{i}"

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"550.54.15"

    def nvmlDeviceGetName(self, h: str) -> bytes:
        return b"NVIDIA H200"

    def nvmlDeviceGetUtilizationRates(self, h: str) -> Any:
        return SimpleNamespace(gpu=87, memory=41)

    def nvmlDeviceGetMemoryInfo(self, h: str) -> Any:
        return SimpleNamespace(used=6 * GIB, total=80 * GIB, free=74 * GIB)

    def nvmlDeviceGetTemperature(self, h: str, sensor: int) -> int:
        return 65

    def nvmlDeviceGetClockInfo(self, h: str, clock: int) -> int:
        return {0: 1755, 2: 2619}[clock]

    def nvmlDeviceGetMaxClockInfo(self, h: str, clock: int) -> int:
        return {0: 1980, 2: 2619}[clock]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: str) -> int:
        raise NVMLError("Function Not Found")  # an older driver

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: str) -> int:
        return 0x24

    def nvmlDeviceGetPowerUsage(self, h: str) -> int:
        raise NVMLError("Not Supported")

    def nvmlDeviceGetComputeRunningProcesses(self, h: str) -> list[Any]:
        return [SimpleNamespace(pid=4242, usedGpuMemory=5 * GIB)]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: str) -> list[Any]:
        return [
            SimpleNamespace(pid=17, usedGpuMemory=None),
            SimpleNamespace(pid=4242, usedGpuMemory=1),
        ]


def test_figures_are_mapped_with_units_and_source() -> None:
    sample = GpuProbe(FakeNvml()).sample()
    assert sample == GpuSample(
        available=True,
        reason=None,
        source="nvml",
        driver_version="550.54.15",
        devices=(
            GpuDevice(
                index=0,
                name="NVIDIA H200",
                util_percent=87.0,
                mem_util_percent=41.0,
                memory_used=6 * GIB,
                memory_total=80 * GIB,
                temperature_c=65.0,
                clock_graphics_mhz=1755,
                clock_memory_mhz=2619,
                clock_graphics_max_mhz=1980,
                clock_memory_max_mhz=2619,
                throttle_reasons=("sw_power_cap", "sw_thermal_slowdown"),  # 0x04 | 0x20
                power_w=None,  # not supported on this board
                processes=(GpuProcess(17, None), GpuProcess(4242, 5 * GIB)),
            ),
        ),
    )


def test_nvml_is_initialised_once() -> None:
    lib = FakeNvml()
    probe = GpuProbe(lib)
    probe.sample()
    probe.sample()
    GpuProbe(lib).sample()
    assert lib.init_calls == 1


class CountingNvml(FakeNvml):
    """FakeNvml that counts the calls of each NVML function (two GPUs)."""

    def __init__(self) -> None:
        super().__init__(count=2)
        self.calls: dict[str, int] = {}

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        if name.startswith("nvml") and callable(value):
            calls = object.__getattribute__(self, "calls")
            calls[name] = calls.get(name, 0) + 1
        return value


def test_what_cannot_change_is_read_once_per_device() -> None:
    # an H200 spent 1.5 ms of CPU per nvmlDeviceGetMaxClockInfo (bench/gpu_check.py): the
    # name and the two clock limits are read at set-up, the live figures every sample
    lib = CountingNvml()
    probe = GpuProbe(lib)
    samples = [probe.sample() for _ in range(5)]
    assert lib.calls["nvmlDeviceGetMaxClockInfo"] == 2 * 2  # 2 GPUs × (graphics, memory)
    assert lib.calls["nvmlDeviceGetName"] == 2
    assert lib.calls["nvmlDeviceGetClockInfo"] == 5 * 2 * 2  # live: every sample
    assert lib.calls["nvmlDeviceGetUtilizationRates"] == 5 * 2
    last = samples[-1].devices
    assert [(d.index, d.name, d.clock_graphics_max_mhz, d.clock_memory_max_mhz)
            for d in last] == [(0, "NVIDIA H200", 1980, 2619), (1, "NVIDIA H200", 1980, 2619)]


@pytest.mark.parametrize(
    ("lib", "reason"),
    [
        (
            FakeNvml(init_error=NVMLError("NVML Shared Library Not Found")),
            "no NVIDIA driver (NVML's library is not on this machine)",
        ),
        (
            FakeNvml(init_error=OSError("libnvidia-ml.so.1: cannot open")),
            "no NVIDIA driver (NVML's library is not on this machine)",
        ),
        (  # a driver that is there but refuses: its own words
            FakeNvml(init_error=NVMLError("Insufficient Permissions")),
            "NVML unavailable: Insufficient Permissions",
        ),
        (FakeNvml(count=0), "no NVIDIA GPU found"),
    ],
)
def test_no_gpu_is_a_normal_state(lib: FakeNvml, reason: str) -> None:
    sample = GpuProbe(lib).sample()
    assert sample == GpuSample(available=False, reason=reason)


def test_missing_library(monkeypatch: pytest.MonkeyPatch) -> None:
    from llmtop.probes import gpu

    monkeypatch.setattr(gpu, "_load_pynvml", lambda: None)
    assert GpuProbe().sample() == GpuSample(
        available=False, reason="pynvml (nvidia-ml-py) is not installed"
    )


def test_decode_throttle() -> None:
    assert decode_throttle(0) == ()
    assert decode_throttle(0x1 | 0x40) == ("gpu_idle", "hw_thermal_slowdown")


def test_real_library_never_raises() -> None:
    sample = GpuProbe().sample()
    assert sample.source == "nvml"
    if sample.available:
        assert sample.devices and all(d.memory_total for d in sample.devices)
    else:
        assert sample.reason and not sample.devices
