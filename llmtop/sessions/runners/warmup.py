"""Loading the model before the first measured request, for an engine llmtop started itself.

Each `llmtop run` and each TUI session that starts the embedded engine starts a fresh one: its
first request would pay the model's load, a cold start that "run again" cannot cure (`run`'s
and the TUI's first figure was a cold TTFT labelled ok). A load-only request (Ollama's empty
chat) loads it first.
"""

from __future__ import annotations

import time
from typing import Any

from llmtop.engines.base import EngineError
from llmtop.engines.connection import Connection
from llmtop.engines.events import StreamEvent


def started_engine(conn: Connection) -> bool:
    """True when `conn` is to an embedded engine llmtop started itself (fresh, unloaded)."""
    return bool(conn.children) and conn.upstream.name == "embedded"


async def warm_up(conn: Connection, options: dict[str, Any]) -> float | None:
    """Load the model with a load-only request (Ollama's empty chat, with the measured
    request's `options`, so the model is not loaded again for them). Returns the load-only
    request's ms on the client clock (Ollama's load answer carries no durations), None when
    it failed: the measured request then pays the load and says so. Never raises for the
    engine's failure."""
    final: StreamEvent | None = None
    t0 = time.perf_counter_ns()
    try:
        async for event in conn.engine.stream_chat(conn.model, [], options=options):
            final = event
    except EngineError:
        return None
    if final is None or final.failure is not None:
        return None
    return (time.perf_counter_ns() - t0) / 1e6
