"""Session logs built for the compare, HTML and sessions tests: bench logs whose per-request
values are given, written with the real SessionLog and read back with read_log."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from llmtop.sessions.records.log import SessionLog
from tests.unit.test_analysis_report import record_json

OPTIONS = {"temperature": 0.0, "seed": 42, "num_ctx": 4096, "num_predict": 100}
HEADER = {"kind": "bench", "engine": "embedded", "engine_version": "0.3", "host": "h",
          "model": "gemma3:270m", "model_details": {"digest": "abc"}, "options": OPTIONS,
          "environment": {"power": "mains"}}


def lognormal(rng: random.Random, median: float, n: int, sigma: float = 0.1) -> list[float]:
    """n values whose true median is `median` (log-normal spread sigma)."""
    return [rng.lognormvariate(0, sigma) * median for _ in range(n)]


def request(i: int, ttft: float, decode: float, target: int = 200, **extra: Any) -> dict[str, Any]:
    """A measured ok request with this TTFT (ms) and decode rate (tok/s), 5 chunks 10 ms
    apart, started i seconds after 10:00:00."""
    rec = record_json(i, decode, ttft=ttft)
    rec.update(prompt_tokens_target=target, started_at=f"2026-11-30T10:00:{i:02d}+00:00",
               chunks=[[int((ttft + 10 * k) * 1e6), "tok", ""] for k in range(5)], **extra)
    return rec


def write_log(path: Path, ttfts: list[float], decodes: list[float] | None = None,
              target: int = 200, probes: list[dict[str, Any]] = (),  # type: ignore[assignment]
              **header: Any) -> Path:
    """A bench log: one warm-up, then one ok request per TTFT value (decode 20 tok/s unless
    given), then the probe records."""
    log = SessionLog(path, {**HEADER, **header})
    log.write_raw({**request(0, 900.0, 20.0, target), "phase": "warmup"})
    for i, ttft in enumerate(ttfts, start=1):
        log.write_raw(request(i, ttft, decodes[i - 1] if decodes else 20.0, target))
    for p in probes:
        log.write_raw({"type": "probe", **p})
    log.close()
    return path
