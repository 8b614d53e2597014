"""A run's energy figures from its log's "energy" records, for the reports and
compare.

Per source (the CPU packages summed as "rapl:cpu", a GPU, a battery): the medians over the
measured ok requests of their energy, prefill and decode joules, J per output token (decode
J / output tokens) and J per prompt token (prefill J / prompt tokens), total and above idle;
the idle power (preflight's window); the run's all-in figure (the requests' windows summed,
J / all output tokens); and, in a sweep, one all-in figure per level. When a source's
per-request windows are too coarse (a battery, a slow counter: `coarse` in their records),
the per-request medians are left out and the run's figure is the one to read, which the
summary says (`per_request` False, `note`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llmtop.sessions.measure.stats import Summary, summarize
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.records.schema import EnergyRecord, RunLog

NOT_RECORDED = "energy: n/a — not recorded (a log written before llmtop measured energy)"
PER_REQUEST_FIELDS = (
    "energy_j",
    "prefill_j",
    "decode_j",
    "output_j_per_token",
    "prompt_j_per_token",
    "energy_above_idle_j",
    "output_above_idle_j_per_token",
    "prompt_above_idle_j_per_token",
)


@dataclass(frozen=True)
class SourceEnergy:
    """One source's figures in a run.

    per_request: the field name (PER_REQUEST_FIELDS) → Summary over the measured ok
    requests whose windows were not coarse (units: J, J/token). coarse_requests: how many
    requests had a coarse window (left out). values: the non-coarse requests' J per output
    token, in request order (compare's samples). run / levels: the run's and each sweep
    level's all-in record. note: why the per-request figures are not given, when not.
    """

    source: str
    covers: str
    integrated: bool
    idle_power_w: float | None
    per_request: dict[str, Summary]
    coarse_requests: int
    values: list[float]
    run: EnergyRecord | None = None
    levels: list[EnergyRecord] = field(default_factory=list)
    note: str | None = None

    @property
    def resolved(self) -> bool:
        """True when per-request figures are given (some request was not coarse)."""
        return self.per_request["output_j_per_token"].n > 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "source": self.source,
            "covers": self.covers,
            "integrated": self.integrated,
            "idle_power_w": self.idle_power_w,
            "per_request": {k: v.to_dict() for k, v in self.per_request.items()},
            "coarse_requests": self.coarse_requests,
            "note": self.note,
            "run": _body(self.run),
            "levels": [_body(r) for r in self.levels],
        }


@dataclass(frozen=True)
class EnergySummary:
    """A log's energy: the sources line every command printed, whether any source was
    read, and each source's figures (empty when none; `line` then says why)."""

    line: str
    readable: bool
    sources: list[SourceEnergy]

    @property
    def available(self) -> bool:
        """True when some source gave figures."""
        return bool(self.sources)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "line": self.line,
            "readable": self.readable,
            "sources": [s.to_dict() for s in self.sources],
        }


def _body(record: EnergyRecord | None) -> dict[str, Any] | None:
    if record is None:
        return None
    return {k: v for k, v in record.to_json().items() if k not in ("type", "sources")}


def _measured_ok(requests: Iterable[RequestRecord]) -> set[int]:
    return {r.id for r in requests if r.measured and r.status == "ok"}


def summarize_energy(log: RunLog) -> EnergySummary:
    """The energy figures of a log read back (bench, sweep or interactive session)."""
    records = log.energy
    sources = next((r for r in records if r.scope == "sources"), None)
    if sources is None:
        return EnergySummary(NOT_RECORDED, False, [])
    ok = _measured_ok(log.requests)
    names = list(dict.fromkeys(r.source for r in records if r.scope != "sources"))
    return EnergySummary(
        sources.line or "", sources.readable, [source_energy(n, records, ok) for n in names]
    )


def source_energy(name: str, records: Sequence[EnergyRecord], ok: set[int]) -> SourceEnergy:
    """One source's figures from the log's energy records; `ok`: ids of the measured ok
    requests (the only ones counted)."""
    mine = [r for r in records if r.source == name]
    requests = [r for r in mine if r.scope == "request" and r.request_id in ok]
    fine = [r for r in requests if not r.coarse]
    idle = next((r for r in mine if r.scope == "idle"), None)
    run = next((r for r in mine if r.scope == "run"), None)
    covers = next((r.covers for r in mine if r.covers), "")
    per = {f: summarize([getattr(r, f) for r in fine]) for f in PER_REQUEST_FIELDS}
    note = None
    coarse = len(requests) - len(fine)
    if requests and not fine:
        reason = next((r.reason for r in requests if r.reason), "too coarse")
        note = f"per-request windows too coarse ({reason}): aggregated over the run"
    elif coarse:
        note = f"{coarse} of {len(requests)} requests had a window too coarse; left out"
    return SourceEnergy(
        source=name,
        covers=covers,
        integrated=any(r.integrated for r in mine),
        idle_power_w=idle.mean_power_w if idle else None,
        per_request=per,
        coarse_requests=coarse,
        values=[v for r in fine if (v := r.output_j_per_token) is not None],
        run=run,
        levels=[r for r in mine if r.scope == "level"],
        note=note,
    )
