"""The engine's own figures over a session, summed up for its report.

While the TUI's engine panel (F4) is open it reads the engine's own view (llama-server's
`/slots` and `/metrics`, vLLM's `/metrics`, Ollama's `/api/ps`) and logs each changed reading
as an `engine_state` record (records/schema.EngineStateRecord). A report of that session
shows what they held: how many requests the engine ran and queued at most, its KV cache's use
from least to most, and its own decode rate beside llmtop's client-side one, with the panel's
rule for a disagreement (engines/live_state.disagreement: beyond DISAGREE_PCT the two figures
describe different work). A session with no such records has no section: absent is not zero.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from llmtop.engines.live_state import disagreement
from llmtop.sessions.measure.metrics import CLIENT_DECODE
from llmtop.sessions.records.schema import EngineStateRecord, RunLog


@dataclass(frozen=True, slots=True)
class EngineOwnView:
    """What the `engine_state` records of one engine held.

    kind / url: the engine's kind and root; readings: its records. processing_max /
    waiting_max: the most requests it ran / queued in one reading. kv_pct: (least, most) KV
    cache in use, %. engine_decode / client_decode: the medians of the engine's own decode
    rate (its readings that had one) and of llmtop's client decode over the session's ok
    requests, tokens/s. disagreement: the panel's line when they differ past its bound.
    None: no reading published it.
    """

    kind: str
    url: str
    readings: int
    processing_max: float | None
    waiting_max: float | None
    kv_pct: tuple[float, float] | None
    engine_decode: float | None
    client_decode: float | None
    disagreement: str | None

    def markdown(self) -> list[str]:
        """The report's section, heading first."""
        def num(v: float | None, unit: str = "") -> str:
            return "n/a" if v is None else f"{v:g}{unit}"
        kv = "n/a" if self.kv_pct is None else f"{self.kv_pct[0]:.1f} → {self.kv_pct[1]:.1f} %"
        lines = ["", "## The engine's own view", "",
                 (f"{self.kind} at {self.url}, {self.readings} readings while the engine panel "
                 "was open (each one that changed):"), "",
                 (f"- requests running at most: {num(self.processing_max)}; queued at most: "
                 f"{num(self.waiting_max)}"),
                 f"- KV cache in use: {kv}"]
        if self.engine_decode is not None or self.client_decode is not None:
            agree = (f" — ⚠ {self.disagreement}" if self.disagreement else
                     " — they agree" if self.engine_decode and self.client_decode else "")
            lines.append(f"- decode, medians: the engine's own {num(_round(self.engine_decode))}"
                         f" tok/s, llmtop's {num(_round(self.client_decode))} tok/s{agree}")
        return lines

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: every field, kv_pct as [least, most]."""
        return {"kind": self.kind, "url": self.url, "readings": self.readings,
                "processing_max": self.processing_max, "waiting_max": self.waiting_max,
                "kv_pct": list(self.kv_pct) if self.kv_pct else None,
                "engine_decode_tok_s": self.engine_decode,
                "client_decode_tok_s": self.client_decode, "disagreement": self.disagreement}


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def _most(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def engine_own_view(log: RunLog) -> EngineOwnView | None:
    """The summary of the log's `engine_state` records (the engine read most often, when
    the session picked another one with F5), None when it has none."""
    states = list(log.of_type(EngineStateRecord))
    if not states:
        return None
    url = statistics.mode(s.url for s in states)
    mine = [s for s in states if s.url == url]
    kv = [s.kv_pct for s in mine if s.kv_pct is not None]
    engine = [s.decode_tok_s for s in mine if s.decode_tok_s]
    client = [v for r in log.requests if r.status == "ok" and r.phase != "warmup"
              and (v := r.metric(CLIENT_DECODE.key)) is not None]
    engine_decode = statistics.median(engine) if engine else None
    client_decode = statistics.median(client) if client else None
    return EngineOwnView(mine[0].kind, url, len(mine), _most([s.processing for s in mine]),
                         _most([s.waiting for s in mine]), (min(kv), max(kv)) if kv else None,
                         engine_decode, client_decode,
                         disagreement(client_decode, engine_decode))
