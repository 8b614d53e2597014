"""The energy records: what a source is, one timestamped reading of it, and the results.

Every stamp is `time.perf_counter_ns()` (durations only; the project's rule); a wall-clock
time, where one is wanted, is a label added by the caller. Every `to_dict()` is JSON-ready
and names its units in its field names (`_j`, `_w`, `_s`, `_ns`, `_uj`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Kind(StrEnum):
    """How a source's readings turn into joules (see `window.segment_joules`).

    COUNTER: a cumulative energy counter that only rises, and may wrap at `wrap_range`
        (RAPL `energy_uj`, NVML's total energy in mJ). joules = Δvalue × `joules_per_unit`.
    LEVEL: stored energy or charge that falls as energy is used (a battery's `energy_now` in
        µWh, or `charge_now` in µAh with the voltage read alongside).
        joules = −Δvalue × `joules_per_unit` (× the mean voltage in V for a charge).
    POWER: instantaneous power in W, integrated over time by the trapezoid rule (NVML board
        power, a battery's `power_now`); labelled "integrated".
    """

    COUNTER = "counter"
    LEVEL = "level"
    POWER = "power"


class Role(StrEnum):
    """What a source's joules add up with.

    PACKAGE: a CPU package (RAPL `package-N`): packages are summed into the CPU total.
    SUBDOMAIN: a part of a package (RAPL `core`, `uncore`, `dram` under `intel-rapl:N`):
        reported on its own, never added to its package (core and uncore are inside it).
    PLATFORM: the whole platform (RAPL `psys`): it contains the packages, so never added.
    GPU: one GPU board. BATTERY: the whole machine while it runs on battery.
    ABSENT: a placeholder saying why a family of sources gives nothing here.
    """

    PACKAGE = "package"
    SUBDOMAIN = "subdomain"
    PLATFORM = "platform"
    GPU = "gpu"
    BATTERY = "battery"
    ABSENT = "absent"


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """One energy source, as found on this machine.

    name: stable id, e.g. "rapl:package-0", "rapl:package-0/dram", "nvml:gpu0",
        "battery:BAT0"; a placeholder's name is the family ("rapl", "nvml", "battery", "apple").
    kind / role: see `Kind` and `Role`.
    unit: the raw reading's unit ("uJ", "mJ", "uWh", "uAh", "W").
    joules_per_unit: J per raw unit (1e-6 for µJ, 1e-3 for mJ, 3.6e-3 for µWh (1 µWh =
        1e-6 W × 3600 s), 3.6e-3 C per µAh to be multiplied by volts, 1.0 for W·s).
    resolution_j: the smallest energy step a reading can show, J; None when not known.
    update_period_s: how often the hardware refreshes the value, s; None when not known
        (then `window.observed_update_period` measures it from the samples).
    covers: in words, what the joules include ("CPU package 0", "DRAM of package 0",
        "GPU 0 board", "whole machine while on battery").
    readable: whether this process can read it now; reason: why not (None when readable).
    wrap_range: the counter's range in raw units (RAPL `max_energy_range_uj`); None: no wrap.
    coarse: True for a source too slow for one request by nature (a battery gauge:
        resolution and update period of seconds to minutes): aggregate over the run.
    duplicate_of: the name of the source this one mirrors (the same RAPL package through
        MMIO, or a die of a multi-die package reading the package's counter); not summed.
    path: the file read, where there is one.
    """

    name: str
    kind: Kind
    role: Role
    unit: str
    joules_per_unit: float
    covers: str
    readable: bool
    reason: str | None = None
    resolution_j: float | None = None
    update_period_s: float | None = None
    wrap_range: float | None = None
    coarse: bool = False
    duplicate_of: str | None = None
    path: str | None = None

    @property
    def integrated(self) -> bool:
        """True when the joules come from integrating power samples (Kind.POWER)."""
        return self.kind is Kind.POWER

    @property
    def summed(self) -> bool:
        """True when this source adds into the CPU total: a readable, non-duplicate package."""
        return self.role is Role.PACKAGE and self.readable and self.duplicate_of is None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (enums → strings)."""
        return {
            "name": self.name,
            "kind": self.kind.value,
            "role": self.role.value,
            "unit": self.unit,
            "joules_per_unit": self.joules_per_unit,
            "covers": self.covers,
            "readable": self.readable,
            "reason": self.reason,
            "resolution_j": self.resolution_j,
            "update_period_s": self.update_period_s,
            "wrap_range": self.wrap_range,
            "integrated": self.integrated,
            "coarse": self.coarse,
            "duplicate_of": self.duplicate_of,
            "path": self.path,
        }


@dataclass(frozen=True, slots=True)
class EnergySample:
    """One reading of one source.

    t_ns: `time.perf_counter_ns()` at the reading (the midpoint of the read call).
    value: the raw reading in the source's `unit`; None when the source gave nothing at this
        stamp (a read error, or a battery that is not discharging): a window across it has
        no joules.
    volts: the voltage read with a battery's charge (V); None otherwise.
    """

    t_ns: int
    value: float | None
    volts: float | None = None

    def to_dict(self, unit: str = "") -> dict[str, Any]:
        """JSON-ready dict; with the source's `unit` the value's key names it ("value_uj",
        "value_mj", "value_uwh", "value_uah", "value_w"), else "value"."""
        key = f"value_{unit.lower()}" if unit else "value"
        return {"t_ns": self.t_ns, key: self.value, "voltage_v": self.volts}


@dataclass(frozen=True, slots=True)
class WindowEnergy:
    """The energy one source measured in the window [t0_ns, t1_ns].

    joules: J in the window; None when the samples cannot say (`reason` tells why).
    duration_s: (t1_ns − t0_ns) / 1e9.
    mean_power_w: joules / duration_s (None when either is missing or duration is 0).
    coarse: True when the window is too short for this source to resolve (`reason` says
        which rule: update period, sample spacing or resolution; see `window.window_energy`):
        such a figure is an estimate for one request; aggregate over the run.
    samples_inside: samples with t0_ns ≤ t_ns ≤ t1_ns.
    """

    source: str
    t0_ns: int
    t1_ns: int
    joules: float | None
    coarse: bool
    reason: str | None
    samples_inside: int
    integrated: bool = False

    @property
    def duration_s(self) -> float:
        """Window length in seconds."""
        return (self.t1_ns - self.t0_ns) / 1e9

    @property
    def mean_power_w(self) -> float | None:
        """Mean power over the window, W; None without joules or for an empty window."""
        if self.joules is None or self.t1_ns <= self.t0_ns:
            return None
        return self.joules / self.duration_s

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "source": self.source,
            "t0_ns": self.t0_ns,
            "t1_ns": self.t1_ns,
            "duration_s": self.duration_s,
            "energy_j": self.joules,
            "mean_power_w": self.mean_power_w,
            "coarse": self.coarse,
            "reason": self.reason,
            "samples_inside": self.samples_inside,
            "integrated": self.integrated,
        }


@dataclass(frozen=True, slots=True)
class RequestEnergy:
    """One request's energy from one source, split at the first token.

    total: send → last chunk; prefill: send → first token; decode: first token → last chunk
        (prefill and decode None when the request had no first token).
    j_per_output_token: decode J / output tokens; j_per_prompt_token: prefill J / prompt
        tokens (None where a count is 0 or the energy is unknown).
    idle_power_w: the idle power subtracted for the above-idle figures (None: not given).
    *_above_idle_j: the same energies less idle_power_w × the window's seconds, and the
        per-token figures from them. They may be negative when the idle estimate is high.
    """

    source: str
    total: WindowEnergy
    prefill: WindowEnergy | None
    decode: WindowEnergy | None
    prompt_tokens: int
    output_tokens: int
    j_per_output_token: float | None
    j_per_prompt_token: float | None
    idle_power_w: float | None = None
    total_above_idle_j: float | None = None
    prefill_above_idle_j: float | None = None
    decode_above_idle_j: float | None = None
    j_per_output_token_above_idle: float | None = None
    j_per_prompt_token_above_idle: float | None = None

    @property
    def coarse(self) -> bool:
        """True when any window used is too coarse for one request."""
        return any(w is not None and w.coarse for w in (self.total, self.prefill, self.decode))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (per-token fields end in `_j_per_token`)."""
        return {
            "source": self.source,
            "energy_j": self.total.joules,
            "prefill_j": self.prefill.joules if self.prefill else None,
            "decode_j": self.decode.joules if self.decode else None,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "output_j_per_token": self.j_per_output_token,
            "prompt_j_per_token": self.j_per_prompt_token,
            "idle_power_w": self.idle_power_w,
            "energy_above_idle_j": self.total_above_idle_j,
            "prefill_above_idle_j": self.prefill_above_idle_j,
            "decode_above_idle_j": self.decode_above_idle_j,
            "output_above_idle_j_per_token": self.j_per_output_token_above_idle,
            "prompt_above_idle_j_per_token": self.j_per_prompt_token_above_idle,
            "coarse": self.coarse,
            "windows": {
                "total": self.total.to_dict(),
                "prefill": self.prefill.to_dict() if self.prefill else None,
                "decode": self.decode.to_dict() if self.decode else None,
            },
        }


@dataclass(frozen=True, slots=True)
class RunEnergy:
    """A whole run's (or one load level's) energy from one source: the figure to use when
    per-request windows are too coarse.

    window: the run's window. j_per_output_token: window J / all output tokens (the run's
    energy includes prefill, so this is the all-in figure, like vLLM's
    `gpu_energy_per_output_token_j`). *_above_idle: less idle_power_w × the window's seconds.
    """

    source: str
    window: WindowEnergy
    prompt_tokens: int
    output_tokens: int
    requests: int
    j_per_output_token: float | None
    idle_power_w: float | None = None
    above_idle_j: float | None = None
    j_per_output_token_above_idle: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "source": self.source,
            "energy_j": self.window.joules,
            "duration_s": self.window.duration_s,
            "mean_power_w": self.window.mean_power_w,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "requests": self.requests,
            "output_j_per_token": self.j_per_output_token,
            "idle_power_w": self.idle_power_w,
            "energy_above_idle_j": self.above_idle_j,
            "output_above_idle_j_per_token": self.j_per_output_token_above_idle,
            "coarse": self.window.coarse,
            "window": self.window.to_dict(),
        }
