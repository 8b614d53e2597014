"""What a load sweep reports as it runs and when it ends (`LoadProgress`, `LoadOutcome`), and
the client it streams through (`pooled_engine`); the runner is runner.py."""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx

from llmtop.engines.base import Engine
from llmtop.engines.connection import Connection
from llmtop.engines.ollama import OllamaEngine
from llmtop.sessions.analysis.load import LevelResult, LoadAnalysis
from llmtop.sessions.measure.config import LoadConfig
from llmtop.sessions.records.request import RequestRecord

OPEN_LOOP_KEEPALIVE = 256  # idle connections an open loop keeps for reuse (no cap on open ones)


@dataclass(frozen=True)
class LoadProgress:
    """Where the sweep is. phase: "environment", "preflight", "warmup", "calibrating",
    "level" (a level starts), "request" (one finished: `record`), "level-done"
    (`result`: its LevelResult), "done". level: index into the config's levels; value: its
    concurrency or rate; in_flight: requests streaming now; done/total: requests of the level
    finished / planned (total None for a closed loop run by duration)."""

    phase: str
    level: int | None = None
    value: float | None = None
    in_flight: int = 0
    done: int = 0
    total: int | None = None
    record: RequestRecord | None = None
    result: LevelResult | None = None
    message: str = ""


@dataclass
class LoadOutcome:
    """A finished sweep: its analysis (per level, the knee) and the log path."""

    analysis: LoadAnalysis
    log_path: str
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)


def pooled_engine(conn: Connection, config: LoadConfig) -> tuple[Engine, bool]:
    """The client the sweep streams through, and whether the runner must close it.

    An Ollama-API client gets its own connection pool sized to the highest concurrency (so no
    request waits for a connection, and none is re-opened between requests: httpx keeps only
    20 alive by default); an open loop's pool has no cap, since the timetable, not the pool,
    decides how many requests are in flight. Other clients (the relay) are used as they are.
    """
    engine = conn.engine
    if not isinstance(engine, OllamaEngine):
        return engine, False
    if config.mode == "concurrency":
        size = int(max(config.levels))
        limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
    else:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=OPEN_LOOP_KEEPALIVE)
    return OllamaEngine(
        engine.host, name=engine.name, read_timeout_s=engine.read_timeout_s, limits=limits
    ), True
