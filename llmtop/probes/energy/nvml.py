"""NVIDIA GPU energy through NVML, initialised once per process with `probes.gpu` (the same
`_init_once`, so the GPU probe and this share one nvmlInit).

Per GPU: `nvmlDeviceGetTotalEnergyConsumption` (mJ since the driver loaded; Volta and
later) as a COUNTER where the board supports it; else `nvmlDeviceGetPowerUsage` (mW, the
board's power) as POWER samples integrated by the trapezoid rule, labelled "integrated";
else a source marked unreadable with NVML's reason. The counter's update period is not
documented, so none is claimed (`window.observed_update_period` measures it).
"""

from __future__ import annotations

from typing import Any

from llmtop.probes.energy.model import Kind, Role, SourceInfo
from llmtop.probes.gpu import NO_DRIVER, _errors, _init_once, _load_pynvml, _text


class NvmlSource:
    """One GPU's energy counter (mJ) or board power (W). `read()` → (value, None); raises
    NVML's error (or OSError) when the call fails (the reader records a gap)."""

    def __init__(self, info: SourceInfo, lib: Any, handle: Any) -> None:
        self.info = info
        self._lib = lib
        self._handle = handle

    def read(self) -> tuple[float, float | None] | None:
        """mJ since driver load (COUNTER) or W now (POWER)."""
        if self.info.kind is Kind.COUNTER:
            return int(self._lib.nvmlDeviceGetTotalEnergyConsumption(self._handle)), None
        return self._lib.nvmlDeviceGetPowerUsage(self._handle) / 1000.0, None


def nvml_absent(reason: str) -> SourceInfo:
    """The placeholder saying why NVML gives no energy here."""
    if reason.startswith(NO_DRIVER):  # no GPU of that kind: said as the machine's state
        said = f"NVIDIA GPUs: {reason}"
    else:
        said = reason if reason.startswith("NVML") else f"NVML: {reason}"
    return SourceInfo("nvml", Kind.COUNTER, Role.ABSENT, "mJ", 1e-3, "NVIDIA GPUs", False, said)


def discover_nvml(nvml: Any | None = None) -> tuple[list[NvmlSource], str | None]:
    """One source per GPU, and None; or no sources and the reason (no library, no driver, no
    GPU). `nvml`: the pynvml module (default: imported if installed); tests pass a stand-in.
    Never raises."""
    lib = nvml if nvml is not None else _load_pynvml()
    if lib is None:
        return [], "pynvml (nvidia-ml-py) is not installed"
    reason = _init_once(lib)
    if reason is not None:
        return [], reason
    errors = _errors(lib)
    try:
        handles = [lib.nvmlDeviceGetHandleByIndex(i) for i in range(int(lib.nvmlDeviceGetCount()))]
    except errors as exc:
        return [], f"device query failed: {_text(exc)}"
    if not handles:
        return [], "no NVIDIA GPU found"
    out: list[NvmlSource] = []
    for i, h in enumerate(handles):
        covers = f"GPU {i} board"
        try:
            int(lib.nvmlDeviceGetTotalEnergyConsumption(h))
            info = SourceInfo(f"nvml:gpu{i}", Kind.COUNTER, Role.GPU, "mJ", 1e-3, covers, True,
                              resolution_j=1e-3)
        except errors as counter_exc:
            try:
                float(lib.nvmlDeviceGetPowerUsage(h))
                info = SourceInfo(f"nvml:gpu{i}", Kind.POWER, Role.GPU, "W", 1.0,
                                  f"{covers} (integrated power samples)", True)
            except errors as power_exc:
                info = SourceInfo(
                    f"nvml:gpu{i}", Kind.POWER, Role.GPU, "W", 1.0, covers, False,
                    f"NVML: no energy counter ({_text(counter_exc)}) and no power reading "
                    f"({_text(power_exc)})")
        out.append(NvmlSource(info, lib, h))
    return out, None
