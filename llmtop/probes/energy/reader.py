"""Finding this machine's energy sources, and reading them on the probe sampler's beat.

`discover_sources()` looks for every family (RAPL, NVML, battery, Apple IOReport) and gives a
`Discovery`: the sources found (readable or not, each with its reason) and, for a family
with none, a placeholder saying why. `EnergyReader.sample()` reads every readable source once
(a few small sysfs reads or NVML calls: cheap enough for `ProbeSampler`'s 1 s thread) and
keeps a bounded series per source; the window functions (`window`) turn the series into
joules. `describe_sources()` and `version_line()` are the one-line summaries.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from llmtop.probes.energy import apple, battery, drm, nvml, rapl
from llmtop.probes.energy.model import (
    EnergySample,
    Kind,
    RequestEnergy,
    Role,
    SourceInfo,
    WindowEnergy,
)
from llmtop.probes.energy.window import (
    combine,
    request_energy,
    request_from_windows,
    window_energy,
)
from llmtop.probes.gpu_sysfs import DRM_ROOT

NA_PREFIX = "energy: n/a — no readable source"
CPU_GROUP = "rapl:cpu"  # the summed CPU packages, as reports name them
DEFAULT_MAX_SAMPLES = 7200  # two hours at the sampler's 1 s; older samples are dropped


class EnergySource(Protocol):
    """What `EnergyReader` reads: `info`, and `read()` → (value in info.unit, volts or None),
    or None when the source has no reading now; may raise OSError/ValueError/NVML errors."""

    @property
    def info(self) -> SourceInfo:
        """The source's description."""
        ...

    def read(self) -> tuple[float, float | None] | None:
        """One raw reading now."""
        ...


@dataclass(frozen=True, slots=True)
class Discovery:
    """What `discover_sources` found: sources (readable or not) and family placeholders
    (`Role.ABSENT`, readable False, reason set) for families that gave none."""

    sources: tuple[EnergySource, ...]
    absent: tuple[SourceInfo, ...] = field(default=())

    @property
    def infos(self) -> tuple[SourceInfo, ...]:
        """Every source's info, then the placeholders."""
        return tuple(s.info for s in self.sources) + self.absent

    @property
    def readable(self) -> tuple[EnergySource, ...]:
        """The sources this process can read."""
        return tuple(s for s in self.sources if s.info.readable)


def discover_sources(
    powercap_root: Path = rapl.POWERCAP_ROOT,
    power_supply_root: Path = battery.POWER_SUPPLY_ROOT,
    *,
    nvml_lib: Any | None = None,
    platform: str = sys.platform,
    read: rapl.ReadText = rapl.read_text,
    sensors_battery: Callable[[], Any] | None = None,
    drm_root: Path | None = DRM_ROOT,
    apple_lib: Any | None = None,
) -> Discovery:
    """Every energy source this machine offers to an unprivileged process. The roots (the
    DRM root of AMD/Intel GPU boards, None: not looked at), the file reader, the NVML
    library, psutil's battery function, zeus_apple_silicon (`apple_lib`) and the platform are
    parameters so tests use fake trees. Never raises."""
    found: list[EnergySource] = []
    absent: list[SourceInfo] = []
    if platform.startswith("linux"):
        zones = rapl.discover_rapl(powercap_root, read)
        found.extend(zones)
        if not zones:
            absent.append(_absent("rapl", rapl.absent_reason(powercap_root)))
    else:
        absent.append(_absent("rapl", "RAPL: read through Linux powercap only"))
    gpus, why = nvml.discover_nvml(nvml_lib)
    found.extend(gpus)
    if why is not None:
        absent.append(nvml.nvml_absent(why))
    if platform.startswith("linux") and drm_root is not None:
        found.extend(drm.discover_drm(drm_root))  # AMD/Intel boards; none is not a finding
    if platform.startswith("linux"):
        cells = battery.discover_batteries(power_supply_root, read)
        found.extend(cells)
        if not cells:
            absent.append(_absent("battery", f"battery: none under {power_supply_root}"))
    else:
        absent.append(battery.psutil_battery(sensors_battery))
    if platform == "darwin":  # IOReport's energy per rail (energy.apple), without root
        rails, why = apple.discover_apple(apple_lib, platform)
        found.extend(rails)
        if why is not None:
            absent.append(_absent("apple", why))
    return Discovery(tuple(found), tuple(absent))


def _absent(name: str, reason: str) -> SourceInfo:
    return SourceInfo(name, Kind.COUNTER, Role.ABSENT, "", 0.0, name, False, reason)


@dataclass(frozen=True, slots=True)
class SourcesSummary:
    """`describe_sources`' answer: the one-line summary and every source's info."""

    line: str
    sources: tuple[SourceInfo, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict, for the session log's environment record."""
        return {"line": self.line, "sources": [s.to_dict() for s in self.sources]}


def _label(info: SourceInfo) -> str:
    notes = [info.covers]
    if info.integrated:
        notes.append("integrated")
    if info.coarse:
        notes.append("coarse")
    if info.duplicate_of:
        notes.append(f"mirrors {info.duplicate_of}, not summed")
    return f"{info.name} ({', '.join(notes)})"


def describe_sources(discovery: Discovery | None = None) -> SourcesSummary:
    """The energy line every command prints once: "energy: NAME (covers, …), …" for the
    readable sources, or exactly "energy: n/a — no readable source (REASON; …)" when none
    is readable. `discovery`: default `discover_sources()`."""
    found = discovery if discovery is not None else discover_sources()
    infos = found.infos
    readable = [i for i in infos if i.readable]
    if readable:
        line = "energy: " + ", ".join(_label(i) for i in readable)
    else:
        line = f"{NA_PREFIX} ({'; '.join(_reasons(infos))})"
    return SourcesSummary(line, infos)


def _reasons(infos: Sequence[SourceInfo]) -> list[str]:
    """Each unreadable source's reason once; RAPL's root-only advice once, after the
    names it applies to."""
    out: list[str] = []
    seen: set[str] = set()
    root_only = [i.name for i in infos
                 if not i.readable and i.reason and "CVE-2020-8694" in i.reason]
    for info in infos:
        if info.readable or info.name in root_only:
            continue
        reason = info.reason or "not readable"
        if reason not in seen:
            seen.add(reason)
            out.append(reason if info.role is Role.ABSENT else f"{info.name}: {reason}")
    if root_only:
        advice = next(i.reason for i in infos if i.name == root_only[0])
        out.insert(0, f"{', '.join(root_only)}: {(advice or '').split(': ', 1)[-1]}")
    return out


def version_line(discovery: Discovery | None = None) -> str:
    """For `llmtop --version -v`: which sources are readable here, e.g.
    "energy sources: readable: rapl:package-0, nvml:gpu0 (integrated); not readable: …".
    `discovery`: default `discover_sources()`."""
    found = discovery if discovery is not None else discover_sources()
    infos = found.infos
    ok = [i.name + (" (integrated)" if i.integrated else "") for i in infos if i.readable]
    parts = [f"readable: {', '.join(ok) if ok else 'none'}"]
    reasons = _reasons(infos)
    if reasons:
        parts.append(f"not readable: {'; '.join(reasons)}")
    return "energy sources: " + "; ".join(parts)


class EnergyReader:
    """Reads `sources` together and keeps each one's samples (at most `max_samples`, the
    oldest dropped). `clock`: the stamp function (default `time.perf_counter_ns`; tests pass
    their own). Thread-safe: the sampler thread calls `sample()` while others read."""

    def __init__(
        self,
        sources: Sequence[EnergySource],
        *,
        max_samples: int = DEFAULT_MAX_SAMPLES,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        if max_samples < 2:
            raise ValueError(f"max_samples must be ≥ 2, got {max_samples}")
        self._sources = [s for s in sources if s.info.readable]
        self._clock = clock
        self._series: dict[str, deque[EnergySample]] = {
            s.info.name: deque(maxlen=max_samples) for s in self._sources
        }
        self._lock = threading.Lock()  # the series, between the sampler and the readers
        self._sampling = threading.Lock()  # one sample() at a time: stamps stay in order
        self.last_cost_ns = 0  # perf_counter ns the last `sample()` took

    @property
    def infos(self) -> tuple[SourceInfo, ...]:
        """The readable sources this reader samples."""
        return tuple(s.info for s in self._sources)

    def info(self, name: str) -> SourceInfo:
        """The source named `name`; raises KeyError for an unknown name."""
        for source in self._sources:
            if source.info.name == name:
                return source.info
        raise KeyError(name)

    def sample(self) -> dict[str, EnergySample]:
        """Read every source once; each stamp is the midpoint of its own read. A read that
        fails (or gives nothing) is a sample with value None. Returns the new samples by
        source name. Never raises for a source's failure."""
        with self._sampling:
            started = time.perf_counter_ns()
            new: dict[str, EnergySample] = {}
            for source in self._sources:
                before = self._clock()
                try:
                    raw = source.read()
                except Exception:  # noqa: BLE001 - a failed read is a gap, not a crash
                    raw = None
                t_ns = (before + self._clock()) // 2
                value, volts = raw if raw is not None else (None, None)
                new[source.info.name] = EnergySample(t_ns, value, volts)
            with self._lock:
                for name, s in new.items():
                    self._series[name].append(s)
            self.last_cost_ns = time.perf_counter_ns() - started
            return new

    def record(self, new: dict[str, EnergySample]) -> dict[str, dict[str, Any]]:
        """`sample()`'s result as a JSON-ready record for the session log: source name →
        the sample's dict, its value keyed with the source's unit ("value_uj", …)."""
        units = {s.info.name: s.info.unit for s in self._sources}
        return {name: s.to_dict(units.get(name, "")) for name, s in new.items()}

    def samples(self, name: str) -> tuple[EnergySample, ...]:
        """A copy of the samples kept for source `name`; raises KeyError for an unknown name."""
        with self._lock:
            return tuple(self._series[name])

    def window(self, name: str, t0_ns: int, t1_ns: int) -> WindowEnergy:
        """`window.window_energy` over source `name`'s samples. For a source whose update
        period is known (RAPL) only the samples from the last one at or before t0_ns on are
        used (walked from the newest: a request's window is recent), so a window costs its
        own samples, not the whole series; a source that needs its series to judge its
        period (a battery, NVML) gets all of it."""
        info = self.info(name)
        if info.update_period_s is None:
            return window_energy(info, self.samples(name), t0_ns, t1_ns)
        return window_energy(info, self._since(name, t0_ns), t0_ns, t1_ns)

    def _since(self, name: str, t0_ns: int) -> list[EnergySample]:
        """Source `name`'s samples from the last one at or before t0_ns (all, when none is),
        in time order."""
        out: list[EnergySample] = []
        with self._lock:
            for sample in reversed(self._series[name]):
                out.append(sample)
                if sample.t_ns <= t0_ns:
                    break
        out.reverse()
        return out

    def cpu_window(self, t0_ns: int, t1_ns: int) -> WindowEnergy | None:
        """The CPU packages' joules summed ("rapl:cpu"), None without a summed package."""
        names = [i.name for i in self.infos if i.summed]
        if not names:
            return None
        return combine("rapl:cpu", [self.window(n, t0_ns, t1_ns) for n in names])

    def request(
        self,
        name: str,
        send_ns: int,
        first_token_ns: int | None,
        last_chunk_ns: int,
        prompt_tokens: int,
        output_tokens: int,
        idle_power_w: float | None = None,
    ) -> RequestEnergy:
        """`window.request_energy` over source `name`'s samples."""
        return request_energy(self.info(name), self.samples(name), send_ns, first_token_ns,
                              last_chunk_ns, prompt_tokens, output_tokens, idle_power_w)

    def groups(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The figures a run reports, each (label, source names summed into it): CPU_GROUP
        for the CPU packages (`SourceInfo.summed`) when there is one, then every other
        readable source on its own, mirrors (`duplicate_of`) left out: a subdomain or psys
        is inside the packages' figure, so nothing here is to be added to another."""
        out: list[tuple[str, tuple[str, ...]]] = []
        packages = tuple(i.name for i in self.infos if i.summed)
        if packages:
            out.append((CPU_GROUP, packages))
        out.extend((i.name, (i.name,)) for i in self.infos
                   if not i.summed and i.duplicate_of is None and i.role is not Role.PACKAGE)
        return tuple(out)

    def covers(self, label: str) -> str:
        """What a group's joules include, in words (`groups`' labels)."""
        if label == CPU_GROUP:
            parts = [i.covers for i in self.infos if i.summed]
            return ", ".join(parts) if len(parts) > 1 else parts[0]
        return self.info(label).covers

    def group_window(self, label: str, names: Sequence[str], t0_ns: int,
                     t1_ns: int) -> WindowEnergy:
        """The window's joules of one group: its one source's, or the sum (`combine`)."""
        if len(names) == 1 and names[0] == label:
            return self.window(label, t0_ns, t1_ns)
        return combine(label, [self.window(n, t0_ns, t1_ns) for n in names])

    def group_request(
        self,
        label: str,
        names: Sequence[str],
        send_ns: int,
        first_token_ns: int | None,
        last_chunk_ns: int,
        prompt_tokens: int,
        output_tokens: int,
        idle_power_w: float | None = None,
    ) -> RequestEnergy:
        """`request_energy` for a group (`groups`): each window summed over its sources.
        Raises ValueError for stamps out of order or negative token counts."""
        if first_token_ns is not None and not send_ns <= first_token_ns <= last_chunk_ns:
            raise ValueError("stamps must satisfy send ≤ first token ≤ last chunk: "
                             f"{send_ns}, {first_token_ns}, {last_chunk_ns}")
        total = self.group_window(label, names, send_ns, last_chunk_ns)
        prefill = decode = None
        if first_token_ns is not None:
            prefill = self.group_window(label, names, send_ns, first_token_ns)
            decode = self.group_window(label, names, first_token_ns, last_chunk_ns)
        return request_from_windows(label, total, prefill, decode, prompt_tokens,
                                    output_tokens, idle_power_w)
