"""The latency target a sweep is judged against (pure; no I/O).

`Slo`: "ttft=500ms,tpot=50ms,e2e=10s" → per-request limits in ms; a request meets the SLO
when it completed ok and every given term holds (goodput, as in DistServe and
`vllm bench serve --goodput`: requests/s that meet every term). It stands with the measuring
core, below the sweep's analysis (analysis/load.py) that judges against it, because the
sweep's configuration (measure/config.py) carries one into the log's header, and the CLI and
the TUI's form parse one without the analysis.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from llmtop.sessions.measure.metrics import E2E, TPOT, TTFT

_LIMITED = (TTFT, TPOT, E2E)  # the metrics an SLO limits, in its fields' order
SLO_TERMS = tuple(m.name for m in _LIMITED)  # "ttft", "tpot", "e2e"
ATTAINMENT = 0.90  # share of requests that must meet every term: the knee's and the search's
# rule (DistServe's SLO attainment target of 90 %)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$")
_UNIT_MS = {"ms": 1.0, "s": 1000.0, "m": 60_000.0}


def parse_duration_ms(text: str, default_unit: str = "ms") -> float:
    """ "500ms" → 500.0, "10s" → 10000.0, "1.5m" → 90000.0, "250" → in `default_unit`.
    Raises ValueError naming the text for anything else (negative, empty, other units)."""
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a duration (use e.g. 500ms, 10s, 2m)")
    return float(m.group(1)) * _UNIT_MS[m.group(2) or default_unit]


@dataclass(frozen=True, slots=True)
class Slo:
    """Per-request latency limits in ms; None = no limit on that term."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    @classmethod
    def parse(cls, text: str) -> Slo:
        """ "ttft=500ms,tpot=50ms,e2e=10s" (any subset, bare numbers in ms). Raises ValueError
        naming the bad term."""
        limits: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, value = part.partition("=")
            name = name.strip().lower()
            if not sep or name not in SLO_TERMS:
                raise ValueError(
                    f"SLO term {part!r}: use ttft=…, tpot=… or e2e=… (e.g. ttft=500ms)"
                )
            if name in limits:
                raise ValueError(f"SLO term {name!r} is given twice")
            limits[name] = parse_duration_ms(value)
        return cls(*(limits.get(t) for t in SLO_TERMS))

    @property
    def empty(self) -> bool:
        """True when no term is set (then goodput is not judged)."""
        return self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None

    def met(self, ttft_ms: float | None, tpot_ms: float | None, e2e_ms: float | None) -> bool:
        """Whether a completed request's latencies (ms) meet every set term; a set term whose
        value is missing (n/a) is not met."""
        for limit, value in (
            (self.ttft_ms, ttft_ms),
            (self.tpot_ms, tpot_ms),
            (self.e2e_ms, e2e_ms),
        ):
            if limit is not None and (value is None or value > limit):
                return False
        return True

    def describe(self) -> str:
        """ "TTFT ≤ 500 ms / TPOT ≤ 50 ms" (the set terms), or "no SLO"."""
        terms = [
            f"{name} ≤ {limit:g} ms"
            for name, limit in (
                (TTFT.label, self.ttft_ms),
                (TPOT.label, self.tpot_ms),
                (E2E.label, self.e2e_ms),
            )
            if limit is not None
        ]
        return " / ".join(terms) or "no SLO"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Slo:
        """Back from `to_dict()` (None → no SLO)."""
        data = data or {}
        return cls(*(data.get(m.key) for m in _LIMITED))
