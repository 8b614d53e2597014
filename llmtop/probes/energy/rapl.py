"""Linux RAPL energy counters through powercap (`/sys/class/powercap`), read without root
where the kernel allows.

Layout (kernel Documentation/power/powercap/powercap.rst): a zone `intel-rapl:N` per CPU
package (its `name` file says `package-N`, or `package-N-die-M` on multi-die parts) or the
platform (`psys`), with subzones `intel-rapl:N:M` (`core`, `uncore`, `dram`). AMD Zen CPUs
appear under the same `intel-rapl` control type (the kernel's intel_rapl driver serves them
since the 2020 patch "powercap: Add AMD Fam17h RAPL support");
other control types whose name contains "rapl" (e.g. `intel-rapl-mmio`, the same package
through MMIO on recent Intel laptops) are read the same way. Each zone has `energy_uj` (µJ,
cumulative) and `max_energy_range_uj` (the counter's range: it wraps to 0 past it).

Permissions: since CVE-2020-8694 (Platypus, Nov 2020) `energy_uj` is mode 0400 root on most
kernels. A zone that exists but cannot be read is a `SourceInfo` with readable False and a
reason naming the two choices the user has; llmtop never asks for root itself.

Wrap: the range is 2^32 hardware units (262143328850 µJ at 61 µJ, 65.7 kJ at 15.3 µJ), so
at 1 kW a counter wraps about every minute: samples must be closer than one wrap (the 1 s
sampler is); a second wrap between two samples cannot be seen.

Double counting: packages are summed (`Role.PACKAGE`); subzones are reported on their own;
psys contains the packages and is never added; an MMIO zone with the same name as an MSR
zone, and a die zone whose counter equals another die's (multi-die AMD parts expose the
socket's counter once per die), are marked `duplicate_of` and not summed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from llmtop.files import NotRegularFile, open_regular
from llmtop.probes.energy.model import Kind, Role, SourceInfo

POWERCAP_ROOT = Path("/sys/class/powercap")
# Intel SDM vol. 3B, MSR_PKG_ENERGY_STATUS: "updated every ~1msec". The sysfs
# value is in µJ, so 1 µJ is the step a reading can show (the hardware unit is coarser:
# 2^-ESU J, typically 61 µJ or 15.3 µJ, which the driver scales).
UPDATE_PERIOD_S = 0.001
RESOLUTION_J = 1e-6
_ZONE = re.compile(r"^(?P<type>[a-z-]*rapl[a-z-]*):(?P<zone>\d+)(?::(?P<sub>\d+))?$")
_PACKAGE = re.compile(r"^package-(?P<n>\d+)(?:-die-(?P<die>\d+))?$")
_SUBZONE_COVERS = {"core": "CPU cores", "uncore": "uncore (caches, integrated GPU)",
                   "dram": "DRAM"}

ReadText = Callable[[Path], str]


def read_text(path: Path) -> str:
    """The file's text, stripped (the default reader; tests inject their own). One os.read
    of up to 4096 bytes: a sysfs attribute is at most a page, and this costs a third of
    `Path.read_text` (bench/energy_cost.py). Opened without blocking and refused unless it
    is a regular file (files.open_regular: every sysfs attribute is one; a FIFO in its place
    would block open() where no signal handler runs, a device would read forever). Raises
    OSError as open/read do, files.NotRegularFile for anything but a regular file."""
    fd = open_regular(path)
    try:
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    return data.decode("ascii", "replace").strip()


def permission_advice(root: Path) -> str:
    """What the user may choose to run so llmtop can read RAPL without root."""
    return (f"energy_uj is readable by root only (since CVE-2020-8694); to allow it, run "
            f"`sudo chmod a+r {root}/intel-rapl:*/energy_uj` (until reboot) or add a udev "
            'rule: SUBSYSTEM=="powercap", ACTION=="add", RUN+="/bin/chmod a+r %S%p/energy_uj"'
            " — llmtop never asks for root itself")


class RaplSource:
    """One powercap zone's `energy_uj` (µJ counter). `read()` → (µJ, None); raises OSError
    or ValueError when the file cannot be read or parsed (the reader records a gap)."""

    def __init__(self, info: SourceInfo, path: Path, read: ReadText = read_text) -> None:
        self.info = info
        self._path = path
        self._read = read

    def read(self) -> tuple[float, float | None] | None:
        """The counter now, µJ. Raises ValueError for a reading no counter can hold (see
        `_implausible`): a gap, not a figure."""
        value = int(self._read(self._path))
        why = _implausible(value, self.info.wrap_range)
        if why is not None:
            raise ValueError(why)
        return value, None


def _covers(name: str, parent: str | None) -> tuple[Role, str]:
    if parent is not None:
        return Role.SUBDOMAIN, f"{_SUBZONE_COVERS.get(name, name)} of {parent}"
    m = _PACKAGE.match(name)
    if m:
        die = f" die {m['die']}" if m["die"] is not None else ""
        return Role.PACKAGE, f"CPU package {m['n']}{die}"
    if name == "psys":
        return Role.PLATFORM, "the platform: SoC and more, the packages included"
    return Role.SUBDOMAIN, name  # a top-level zone of another kind: reported on its own


def discover_rapl(root: Path = POWERCAP_ROOT, read: ReadText = read_text) -> list[RaplSource]:
    """Every RAPL zone under `root` as a source (readable or with the reason it is not);
    empty when there is none (see `absent_reason`). Never raises."""
    zones = _zones(root)
    kept: dict[tuple[str, str | None], str] = {}  # (zone name, parent) → readable source
    used: set[str] = set()
    sources: list[RaplSource] = []
    first_value: dict[tuple[float, float | None], str] = {}  # die counters, for mirrors
    for _, path, m in zones:
        zone_name = _safe(read, path / "name") or path.name
        parent = None
        if m["sub"] is not None:
            parent_dir = path.parent / f"{m['type']}:{m['zone']}"
            parent = _safe(read, parent_dir / "name") or parent_dir.name
        role, covers = _covers(zone_name, parent)
        wrap = _number(_safe(read, path / "max_energy_range_uj"))
        energy = path / "energy_uj"
        value, reason = _first_reading(read, energy, root, wrap)
        readable = reason is None
        name = f"rapl:{parent}/{zone_name}" if parent else f"rapl:{zone_name}"
        if name in used:  # the same zone through another interface (MMIO after MSR)
            name = f"{name}@{path.name}"
        used.add(name)
        # a mirror only of a readable zone: an unreadable MSR zone leaves its MMIO twin counted
        duplicate = kept.get((zone_name, parent))
        if duplicate is None and readable:
            kept[(zone_name, parent)] = name
        die = role is Role.PACKAGE and "-die-" in zone_name
        if die and value is not None and duplicate is None:
            mirror = first_value.get((value, wrap))
            if mirror is not None:
                duplicate = mirror  # the same counter read through another die
            else:
                first_value[(value, wrap)] = name
        info = SourceInfo(
            name=name, kind=Kind.COUNTER, role=role, unit="uJ", joules_per_unit=1e-6,
            covers=covers, readable=readable, reason=reason, resolution_j=RESOLUTION_J,
            update_period_s=UPDATE_PERIOD_S, wrap_range=wrap or None,
            duplicate_of=duplicate, path=str(energy),
        )
        sources.append(RaplSource(info, energy, read))
    return sources


def _zones(root: Path) -> list[tuple[tuple[int, int, int, int], Path, re.Match[str]]]:
    """The RAPL zone folders under `root` with their name's match, in the order they are
    read: MSR zones before MMIO ones (a zone and its MMIO twin: the MSR one is kept), then
    by zone and subzone number (a parent before its subzones); empty when `root` cannot be
    listed."""
    zones: list[tuple[tuple[int, int, int, int], Path, re.Match[str]]] = []
    try:
        entries = list(root.iterdir()) if root.is_dir() else []
    except OSError:
        entries = []
    for entry in entries:
        m = _ZONE.match(entry.name)
        if m:
            mmio = 0 if m["type"] == "intel-rapl" else 1  # MSR zones first: they are kept
            key = (mmio, int(m["zone"]), -1 if m["sub"] is None else int(m["sub"]), 0)
            zones.append((key, entry, m))
    zones.sort(key=lambda z: (z[0], z[1].name))
    return zones


def _first_reading(read: ReadText, energy: Path, root: Path, wrap: float | None
                   ) -> tuple[int | None, str | None]:
    """(the counter now in µJ, None when it cannot be read; why the zone is unreadable, None
    when it is readable): unreadable when denied (with `permission_advice`), not a regular
    file, failing to read or parse, or holding a value no counter can (`_implausible`)."""
    try:
        value = int(read(energy))
    except PermissionError:
        return None, f"{energy}: {permission_advice(root)}"
    except NotRegularFile as exc:  # a sysfs attribute is a regular file; this is not one
        return None, f"{exc}: not a sysfs counter"
    except (OSError, ValueError) as exc:
        return None, f"{energy}: {type(exc).__name__}: {exc}"
    implausible = _implausible(value, wrap)
    return value, None if implausible is None else f"{energy}: {implausible}"


def absent_reason(root: Path = POWERCAP_ROOT) -> str:
    """Why there is no RAPL source: the root or its zones are missing."""
    if not root.is_dir():
        return f"RAPL: no {root} (not Linux, or no powercap driver: a VM usually has none)"
    return f"RAPL: no *rapl*:N zone under {root} (no RAPL driver for this CPU)"


def _implausible(value: int, wrap: float | None) -> str | None:
    """Why a reading of `energy_uj` (µJ) with range `wrap` (`max_energy_range_uj`, µJ; None:
    unreadable) cannot come from a RAPL counter, or None. The counter counts up from 0 and
    wraps to 0 past its range (powercap.rst), so it is never negative and never above a
    positive range; a range of 0 or less describes no counter (the wrap arithmetic would
    add it to every fall)."""
    if value < 0:
        return f"reads {value}: an energy counter counts up from 0, so it is not a source"
    if wrap is not None and wrap <= 0:
        return (f"its max_energy_range_uj is {wrap:g}: a counter's range is positive, so it "
                "is not a source")
    if wrap is not None and value > wrap:
        return (f"reads {value}, past its max_energy_range_uj {wrap:g}: the counter wraps to 0 "
                "there, so it is not a source")
    return None


def _safe(read: ReadText, path: Path) -> str | None:
    try:
        return read(path)
    except (OSError, ValueError):
        return None


def _number(text: str | None) -> float | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
