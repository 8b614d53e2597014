"""What `llmtop load` sweeps and when requests leave (pure; no I/O). The latency target it
judges against, `Slo`, is the analysis's (analysis/slo.py).

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

from llmtop.sessions.analysis.slo import Slo, parse_duration_ms
from llmtop.sessions.measure.options import Workload

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
    search: an SLO search (analysis/search.py) between the lowest and the highest level
    instead of a sweep of every level; needs an SLO and two levels.
    early_stop: stop an open-loop level once it is over-saturated (analysis/saturation.py).
    measure_cache: with a dataset (measure/dataset.py), send its requests as they are, so a
    prefix cache may serve them (default: each starts with a tag of its own).
    """

    mode: Mode = "concurrency"
    levels: tuple[float, ...] = (1, 2, 4, 8)
    requests: int | None = 40
    duration_s: float | None = None
    arrivals: Literal["poisson", "constant"] = "poisson"
    prompt_tokens: int = 200
    slo: Slo = field(default_factory=Slo)
    preflight_s: float = 0.0
    search: bool = False
    early_stop: bool = True
    measure_cache: bool = False  # a --dataset's requests sent as they are, not cache-busted

    def __post_init__(self) -> None:
        if (self.requests is None) == (self.duration_s is None):
            raise ValueError("give either requests or duration_s per level, not both or neither")
        if not self.levels or any(v <= 0 for v in self.levels):
            raise ValueError("levels must be positive")
        if self.mode == "concurrency" and any(v != int(v) for v in self.levels):
            raise ValueError("concurrency levels must be whole numbers")
        if self.search and self.slo.empty:
            raise ValueError("--search finds the highest level meeting an SLO: give one with "
                             "--slo, e.g. --slo ttft=500ms,tpot=50ms")
        if self.search and len(set(self.levels)) < 2:
            raise ValueError("--search needs a low and a high bound: two levels, e.g. "
                             "--concurrency 1,16 or --rate 0.5,8")

    def level_label(self, value: float) -> str:
        """ "1 user", "4 users" or "2 req/s"."""
        if self.mode != "concurrency":
            return f"{value:g} req/s"
        return f"{value:g} {'user' if value == 1 else 'users'}"

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


# A level's users each hold a connection (a file descriptor) and a task; the engines llmtop
# measures serve a few requests at once (Ollama's OLLAMA_NUM_PARALLEL, llama-server's
# --parallel slots), so past MAX_USERS a sweep measures only its own queue. The machine's
# own limit is the open-file limit, two descriptors a user (the socket, and the headroom of
# a pool) with FD_RESERVE for everything else.
MAX_USERS = 1024
FD_RESERVE = 64
MAX_RATE = 1000.0  # requests/s: an open loop starts a task per request
MAX_LEVEL_S = 86_400.0  # a level of --duration lasts at most a day


def max_users() -> int:
    """The most concurrent users a level may have here: MAX_USERS, or fewer when the
    open-file limit (RLIMIT_NOFILE, soft) allows fewer, at least 1."""
    try:
        import resource  # Unix only

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return MAX_USERS
    if soft == resource.RLIM_INFINITY:
        return MAX_USERS
    return max(1, min(MAX_USERS, (soft - FD_RESERVE) // 2))


_HOURS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*h\s*$")


def parse_level_duration(text: str) -> float:
    """--duration's value in seconds ("60s", "2m", "1h"; a bare number is seconds). Raises
    ValueError for what is not a duration, 0, or more than MAX_LEVEL_S ("too long")."""
    hours = _HOURS.match(text)
    seconds = float(hours.group(1)) * 3600 if hours else parse_duration_ms(text, "s") / 1000
    if seconds <= 0:
        raise ValueError(f"{text!r} is not a duration > 0")
    if seconds > MAX_LEVEL_S:
        raise ValueError(f"{text!r} is too long: a level lasts at most 24h ({MAX_LEVEL_S:g} s)")
    return seconds


def parse_levels(text: str, whole: bool) -> tuple[float, ...]:
    """ "1,2,4,8" → (1, 2, 4, 8); "0.5,1,2" → (0.5, 1.0, 2.0). `whole`: concurrency levels must
    be whole numbers from 1 to `max_users()`; rates are at most MAX_RATE. Levels are sorted
    and deduplicated. Raises ValueError naming the bad part (and the limit, with why)."""
    levels = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"level {part!r} is not a number") from None
        if not math.isfinite(value) or value <= 0 or (whole and value != int(value)):
            kind = "a whole number of users >= 1" if whole else "a rate > 0 (requests/s)"
            raise ValueError(f"level {part!r} is not {kind}")
        if whole and value > max_users():
            raise ValueError(
                f"level {part!r} is more users than this machine can run: at most "
                f"{max_users()} (MAX_USERS {MAX_USERS}, and two open files a user within the "
                "open-file limit, ulimit -n); an engine serves a few at once and queues the rest")
        if not whole and value > MAX_RATE:
            raise ValueError(f"level {part!r} is more than {MAX_RATE:g} requests/s, the most an "
                             "open loop here starts")
        levels.add(int(value) if whole else value)
    if not levels:
        raise ValueError("no levels given")
    return tuple(sorted(levels))
