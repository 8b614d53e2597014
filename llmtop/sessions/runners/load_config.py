"""What `llmtop load` sweeps, the latency target it judges against, and when requests leave
(pure; no I/O).

* `Slo`: "ttft=500ms,tpot=50ms,e2e=10s" → per-request limits in ms; a request meets the SLO
  when it completed ok and every given term holds (goodput, as in DistServe and
  `vllm bench serve --goodput`: requests/s that meet every term).
* `LoadConfig`: closed loop (`mode="concurrency"`: N workers, each sends its next request
  when its last one ends) or open loop (`mode="rate"`: requests leave on a timetable, Poisson
  or constant, whatever the server does).
* `arrival_offsets`: the open loop's timetable, seeded, so a run can be repeated.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from llmtop.sessions.measure.options import Workload

SLO_TERMS = ("ttft", "tpot", "e2e")
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
                ("TTFT", self.ttft_ms),
                ("TPOT", self.tpot_ms),
                ("E2E", self.e2e_ms),
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
        return cls(data.get("ttft_ms"), data.get("tpot_ms"), data.get("e2e_ms"))


Mode = Literal["concurrency", "rate"]


@dataclass(frozen=True)
class LoadConfig(Workload):
    """A sweep's fixed parameters: the workload (options.Workload) and the sweep's own.

    mode/levels: "concurrency" with worker counts (ints ≥ 1), or "rate" with requests/s (> 0).
    requests: requests per level; or duration_s: seconds per level (closed loop: no request
    starts after it; open loop: rate × duration requests are scheduled). Exactly one is set.
    arrivals: open loop's timetable, "poisson" (exponential gaps, seeded) or "constant".
    prompt_tokens: the calibrated prompt size of every request.
    preflight_s: seconds of machine sampling before the sweep (0 skips it).
    """

    mode: Mode = "concurrency"
    levels: tuple[float, ...] = (1, 2, 4, 8)
    requests: int | None = 40
    duration_s: float | None = None
    arrivals: Literal["poisson", "constant"] = "poisson"
    prompt_tokens: int = 200
    slo: Slo = field(default_factory=Slo)
    preflight_s: float = 0.0

    def __post_init__(self) -> None:
        if (self.requests is None) == (self.duration_s is None):
            raise ValueError("give either requests or duration_s per level, not both or neither")
        if not self.levels or any(v <= 0 for v in self.levels):
            raise ValueError("levels must be positive")
        if self.mode == "concurrency" and any(v != int(v) for v in self.levels):
            raise ValueError("concurrency levels must be whole numbers")

    def level_label(self, value: float) -> str:
        """ "4 users" or "2 req/s"."""
        return f"{value:g} users" if self.mode == "concurrency" else f"{value:g} req/s"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the log header's "load" field)."""
        data = asdict(self)
        data["levels"] = list(self.levels)
        data["slo"] = self.slo.to_dict()
        return data


def arrival_offsets(rate: float, count: int, arrivals: str, seed: int) -> list[float]:
    """When each of `count` open-loop requests leaves, in seconds from the level's start.

    "constant": k / rate. "poisson": a Poisson process of `rate` per second — exponential
    gaps with mean 1/rate (random.expovariate, seeded with `seed`), first request at 0.
    Raises ValueError for a rate ≤ 0 or an unknown arrival kind.
    """
    if rate <= 0:
        raise ValueError(f"rate must be > 0, got {rate!r}")
    if arrivals == "constant":
        return [k / rate for k in range(count)]
    if arrivals != "poisson":
        raise ValueError(f"arrivals must be poisson or constant, got {arrivals!r}")
    rng = random.Random(seed)
    offsets, t = [], 0.0
    for _ in range(count):
        offsets.append(t)
        t += rng.expovariate(rate)
    return offsets


def parse_levels(text: str, whole: bool) -> tuple[float, ...]:
    """ "1,2,4,8" → (1, 2, 4, 8); "0.5,1,2" → (0.5, 1.0, 2.0). `whole`: concurrency levels must
    be whole numbers ≥ 1. Levels are sorted and deduplicated. Raises ValueError naming the bad
    part."""
    levels = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"level {part!r} is not a number") from None
        if not math.isfinite(value) or value <= 0 or (whole and value != int(value)):
            kind = "a whole number of users >= 1" if whole else "a rate > 0 (requests/s)"
            raise ValueError(f"level {part!r} is not {kind}")
        levels.add(int(value) if whole else value)
    if not levels:
        raise ValueError("no levels given")
    return tuple(sorted(levels))
