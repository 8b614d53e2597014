"""AMD and Intel GPU energy from the kernel's hwmon files under /sys/class/drm (no root):
the board's cumulative counter `energy1_input` (µJ; Documentation/hwmon/sysfs-interface.rst,
i915/xe's sysfs-driver-intel-*-hwmon) where the driver gives one, else amdgpu's
`power1_average` / `power1_input` (µW) integrated over the sampler's beat. Cards are found by
`probes.gpu_sysfs.find_cards` (amdgpu, i915, xe only: NVIDIA's energy is NVML's).

A runtime-suspended GPU is not woken to be read (`gpu_sysfs` says why): `read()` gives no
reading then, and the reader records a gap, as for any source without a reading.
"""

from __future__ import annotations

from pathlib import Path

from llmtop.files import read_bounded
from llmtop.probes.energy.model import Kind, Role, SourceInfo
from llmtop.probes.gpu_sysfs import ATTR_LIMIT, DRM_ROOT, DrmCard, find_cards

DRIVERS = frozenset({"amdgpu", "i915", "xe"})
FILES = (("energy1_input", Kind.COUNTER, "uJ", 1e-6),
         ("power1_average", Kind.POWER, "W", 1.0),
         ("power1_input", Kind.POWER, "W", 1.0))


class DrmSource:
    """One card's hwmon energy counter (µJ) or power (W, from µW). `read()` → (value, None),
    or None while the GPU sleeps; raises OSError/ValueError when the file cannot be read or
    parsed (the reader records a gap)."""

    def __init__(self, info: SourceInfo, card: DrmCard, file: Path) -> None:
        self.info = info
        self._status = card.device / "power" / "runtime_status"
        self._file = file

    def read(self) -> tuple[float, float | None] | None:
        """µJ since driver load (COUNTER) or W now (POWER); None while runtime-suspended."""
        try:
            if read_bounded(self._status, ATTR_LIMIT).strip() == b"suspended":
                return None
        except OSError:
            pass  # no runtime PM on this device: it is always awake
        value = int(read_bounded(self._file, ATTR_LIMIT).strip())
        return (float(value), None) if self.info.kind is Kind.COUNTER else (value / 1e6, None)


def discover_drm(root: Path = DRM_ROOT) -> list[DrmSource]:
    """One source per AMD/Intel card with a hwmon energy counter or power reading, named
    "drm:cardN", its `covers` naming the board, the driver and the file. Never raises."""
    out: list[DrmSource] = []
    for card in find_cards(root):
        if card.driver not in DRIVERS or card.hwmon is None:
            continue
        for name, kind, unit, per_unit in FILES:
            if name not in card.hwmon_files:
                continue
            covers = f"{card.vendor} GPU {card.card} board ({card.driver} hwmon {name}"
            covers += ", integrated power samples)" if kind is Kind.POWER else ")"
            info = SourceInfo(f"drm:{card.card}", kind, Role.GPU, unit, per_unit, covers, True,
                              resolution_j=1e-6 if kind is Kind.COUNTER else None,
                              path=str(card.hwmon / name))
            out.append(DrmSource(info, card, card.hwmon / name))
            break
    return out
