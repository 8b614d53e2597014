"""The plain settings the TUI is built from (no Textual here, so the CLI can build them cheaply)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmtop.engines.timeouts import TOKEN_TIMEOUT_S
from llmtop.sessions.measure.options import (
    PROTOCOL_PROMPT_TOKENS,
    PROTOCOL_REQUESTS,
    PROTOCOL_WARMUP,
    Workload,
)

# Idle, a probe sample every 2 s: a sample costs ~5 ms of CPU (+ ~20 ms for the engine's pids
# every 5 s), the panel's redraw ~4 ms more, against an idle budget of 1 % of a core
# (bench/tui_cost.py). A request is sampled every 0.5 s from its start (app.py), so the NOISY
# marks are as fine as before; the idle panel averages CPU over 2 s instead of 1 s.
DEFAULT_PROBE_INTERVAL_S = 2.0


@dataclass(frozen=True)
class TuiSettings:
    """What `make_app` needs.

    engine: "auto", "ollama" or "embedded" (see `llmtop.connect.connect`).
    host / model / model_path: as the CLI flags; None = `connect()`'s default.
    via / relay_url: "direct", or "relay" to stream through llmtop's SSE relay (`--relay URL`).
    options: the Ollama `options` sent with every request (temperature, seed, num_predict…).
    log_path: the session log (JSONL); None = a new file in the user data directory.
    probe_interval_s: seconds between probe samples while idle; while a request streams, every
    1 s (`link.STREAM_PROBE_INTERVAL_S`) or this when faster, and one more as it ends.
    probes: False runs no probe sampler (tests post samples themselves).
    agent: `llmtop agent` to take the probe samples from (`--probes URL`); None = this machine.
    bench_*: the bench screen's (Ctrl+B) form defaults — measured requests per prompt size,
    warm-up requests, prompt sizes (tokens, calibrated) and max output tokens; the source's
    protocol (25 · 1 · 200 · 100). bench_use_cache: reuse a cached prompt calibration.
    bench_preflight_s: seconds the bench samples the machine before it starts (its preflight
    verdict goes to the bench log); None = `BenchConfig`'s default, 0 skips it.
    token_timeout_s: a request with no token for this long ends stalled (`--token-timeout`;
    sessions/measure/request.py), seconds.
    """

    engine: str = "auto"
    host: str | None = None
    model: str | None = None
    model_path: str | None = None
    via: str = "direct"
    relay_url: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    log_path: str | None = None
    probe_interval_s: float = DEFAULT_PROBE_INTERVAL_S
    probes: bool = True
    thresholds: Any = None  # verdict.Thresholds from the config file; None = the defaults
    engine_pids: tuple[int, ...] = ()  # --engine-pid / [engine] pids: the measured engine
    agent: Any = None  # probes.remote.AgentTarget (--probes): samples from the engine's machine
    token_timeout_s: float = TOKEN_TIMEOUT_S
    bench_requests: int = PROTOCOL_REQUESTS
    bench_warmup: int = PROTOCOL_WARMUP
    bench_prompt_tokens: tuple[int, ...] = PROTOCOL_PROMPT_TOKENS
    bench_max_tokens: int = Workload.max_tokens
    bench_use_cache: bool = True
    bench_preflight_s: float | None = None
