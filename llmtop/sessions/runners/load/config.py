"""When a sweep's requests leave and how far it may go (pure; no I/O): the runner's part of
`llmtop load`'s configuration. What the sweep was set up to do, `LoadConfig`, is carried by the
log's header and lives with the measuring core (measure/config.py).

* `arrival_offsets`: the open loop's timetable, seeded, so a run can be repeated.
* `max_users`, `parse_levels`, `parse_level_duration`: the command line's levels and their
  limits on this machine.
"""

from __future__ import annotations

import math
import random
import re

from llmtop.sessions.measure.slo import parse_duration_ms


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
