"""Battery discharge as an energy source: coarse (the gauge's resolution and update period
are seconds to minutes), and only while the machine runs on its battery.

Linux (`/sys/class/power_supply/*/`, kernel Documentation/ABI/testing/sysfs-class-power):
a supply whose `type` is "Battery" (and whose `scope` is not "Device": a mouse's or a
keyboard's battery) gives, in order of preference,
  `energy_now` (µWh): stored energy, a LEVEL; J = −ΔµWh × 3.6e-3;
  `charge_now` (µAh) with `voltage_now` (µV): a LEVEL of charge; J = −ΔµAh × 3.6e-3 C/µAh ×
      mean V (∫V dQ; see `window`);
  `power_now` (µW), or `current_now` (µA) × `voltage_now`: instantaneous power, integrated.
Samples are taken only while `status` is "Discharging"; otherwise a reading is None (a gap).

Other systems: psutil's `sensors_battery()` gives the charge in percent only, not its
capacity in Wh, so no joules can be derived; that is a source marked unreadable, not a guess.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmtop.probes.energy.model import Kind, Role, SourceInfo
from llmtop.probes.energy.rapl import ReadText, read_text

POWER_SUPPLY_ROOT = Path("/sys/class/power_supply")
UWH_J = 3.6e-3  # 1 µWh = 1e-6 W × 3600 s
UAH_C = 3.6e-3  # 1 µAh = 1e-6 A × 3600 s, in coulombs
COVERS = "the whole machine while on battery"


class BatterySource:
    """One battery's discharge. `read()` → (value in `info.unit`, volts or None), or None
    while the battery is not discharging; raises OSError/ValueError on a failed read."""

    def __init__(self, info: SourceInfo, path: Path, form: str, read: ReadText = read_text):
        self.info = info
        self._path = path
        self._form = form
        self._read = read

    def _num(self, name: str) -> int:
        return int(self._read(self._path / name))

    def read(self) -> tuple[float, float | None] | None:
        """The level (µWh or µAh, with V) or power (W) now; None unless discharging.

        A power or current read while discharging counts as its magnitude: the kernel's ABI
        (Documentation/ABI/testing/sysfs-class-power, current_now) gives a discharging
        battery's current as negative, and drivers differ for power_now (Waybar and psutil
        take the magnitude for the same reason); the status already says which way energy
        flows. Raises ValueError for a negative level, charge or voltage (no battery holds
        less than nothing): a gap, not a figure."""
        if self._read(self._path / "status") != "Discharging":
            return None
        if self._form == "energy_now":
            return self._level("energy_now"), None
        if self._form == "charge_now":
            return self._level("charge_now"), self._level("voltage_now") / 1e6
        if self._form == "power_now":
            return abs(self._num("power_now")) / 1e6, None
        return abs(self._num("current_now")) * self._level("voltage_now") / 1e12, None

    def _level(self, name: str) -> int:
        value = self._num(name)
        if value < 0:
            raise ValueError(f"{self._path / name} reads {value}: a level is not negative")
        return value


def _has(read: ReadText, path: Path) -> bool:
    try:
        read(path)
    except (OSError, ValueError):
        return False
    return True


def discover_batteries(
    root: Path = POWER_SUPPLY_ROOT, read: ReadText = read_text
) -> list[BatterySource]:
    """Every system battery under `root` (readable now or not, with the reason); empty when
    there is none. Never raises."""
    try:
        entries = sorted(root.iterdir()) if root.is_dir() else []
    except OSError:
        entries = []
    out: list[BatterySource] = []
    for path in entries:
        if _text(read, path / "type") != "Battery" or _text(read, path / "scope") == "Device":
            continue
        form, kind, unit, jpu = "", Kind.LEVEL, "", 1.0
        if _has(read, path / "energy_now"):
            form, unit, jpu = "energy_now", "uWh", UWH_J
        elif _has(read, path / "charge_now") and _has(read, path / "voltage_now"):
            form, unit, jpu = "charge_now", "uAh", UAH_C
        elif _has(read, path / "power_now"):
            form, kind, unit = "power_now", Kind.POWER, "W"
        elif _has(read, path / "current_now") and _has(read, path / "voltage_now"):
            form, kind, unit = "current_now", Kind.POWER, "W"
        status, why = _text_or_why(read, path / "status")
        reason = None
        if not form:
            reason = f"{path}: no energy_now, charge_now, power_now or current_now to read"
        elif status is None:
            reason = f"{path}/status cannot be read ({why})"
        info = SourceInfo(
            name=f"battery:{path.name}", kind=kind, role=Role.BATTERY, unit=unit,
            joules_per_unit=jpu, covers=COVERS, readable=reason is None, reason=reason,
            coarse=True, path=str(path / form) if form else str(path),
        )
        out.append(BatterySource(info, path, form, read))
    return out


def _text(read: ReadText, path: Path) -> str | None:
    return _text_or_why(read, path)[0]


def _text_or_why(read: ReadText, path: Path) -> tuple[str | None, str]:
    """(the file's text, "") or (None, why it cannot be read: the error's words)."""
    try:
        return read(path), ""
    except (OSError, ValueError) as exc:
        return None, (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc))


def psutil_battery(sensors_battery: Callable[[], Any] | None = None) -> SourceInfo:
    """The battery as psutil sees it off Linux: present or not, never joules (psutil gives
    percent, not Wh). `sensors_battery`: psutil's function (injected in tests)."""
    if sensors_battery is None:
        import psutil

        sensors_battery = getattr(psutil, "sensors_battery", None)
    try:
        battery = sensors_battery() if sensors_battery is not None else None
    except Exception:  # noqa: BLE001 - psutil's battery read fails in many platform ways
        battery = None
    if battery is None:
        reason = "battery: none found"
    else:
        reason = ("battery: psutil gives the charge in % only, not the capacity in Wh, so "
                  "no joules")
    return SourceInfo("battery", Kind.LEVEL, Role.ABSENT, "%", 0.0, COVERS, False, reason,
                      coarse=True)
