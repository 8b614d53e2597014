"""The engine's own view of itself, read live: slots, queue, KV cache, tokens per second,
loaded models (the TUI's engine panel, and `engine_state` records in the session log).

What each kind of engine publishes (docs/protocols.md):

| engine       | route       | figures                                                        |
|--------------|-------------|----------------------------------------------------------------|
| llama-server | `/slots`    | per slot: processing, n_ctx, tokens in its context, decoded    |
| llama-server | `/metrics`  | requests processing / deferred, predicted tokens and seconds,  |
|              |             | KV use (`kv_cache_usage_ratio`, on the builds that publish it) |
| vLLM         | `/metrics`  | requests running / waiting, KV use %, prefix-cache hits,       |
|              |             | generation tokens                                              |
| Ollama (and  | `/api/ps`   | loaded models: context, bytes in VRAM and in RAM, keep-alive   |
| the embedded |             | expiry (wall clock: it counts down)                            |
| engine)      |             |                                                                |

Every parser here is pure (an answer in, figures out) and never raises on what a server
says: a figure that is absent, not a number, NaN or out of range is left out (absent, not
zero) and the reason kept in `notes`. Rates come from two readings: `StateReader` keeps the
previous one and divides the growth of a counter by the perf_counter time between them.

llama-server's `/slots` says, while a slot processes, `n_prompt_tokens` (which on current
builds grows as tokens are generated: the slot's whole context), the prompt tokens processed
and cached, and `next_token[0].n_decoded`; the tokens a slot holds are the larger of
`n_prompt_tokens` and processed + cached + decoded, so that either meaning reads right. An
idle slot says nothing of the prompt cache it keeps: it counts as empty. So where the build
publishes no `kv_cache_usage_ratio`, "KV use" is the busy slots' tokens over the slots'
whole context (said with its source, "from /slots").
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import httpx

from llmtop.stamping.bounds import BoundedTransport, read_whole

# One reading a second while the panel is shown: a reading of llama-server's /slots and
# /metrics cost 3.0 ms of CPU (median of 60; p90 3.7 ms) on a loaded 2-core VM, so 0.3 % of
# a core; the panel's text is built in 0.03 ms and redrawn only when it changed.
PACE_S = 1.0
# An engine whose figures stayed the same for IDLE_AFTER readings (30 s at PACE_S: nobody is
# using it) is read every IDLE_PACE_S until one changes, or a request starts in the TUI.
IDLE_PACE_S = 5.0
IDLE_AFTER = 30
READ_TIMEOUT_S = 0.8  # a route's whole answer; below the pace, so readings never pile up
# A route's body: llama-server's /slots at MAX_SLOTS slots is ~4 MB, vLLM's /metrics ~0.1 MB;
# a longer body is no answer (a server cannot fill llmtop's memory through the panel)
MAX_BODY_BYTES = 8 * 2**20
MAX_SLOTS = 4096  # as llama_props.MAX_SLOTS: more entries are not believed
MAX_MODELS = 64  # /api/ps entries kept (an engine holds a few models at once)
MAX_NAME_CHARS = 256
KINDS = ("llama-server", "vllm", "ollama")
# vLLM renamed its series (0.10: kv_cache_usage_perc, prefix_cache_*); each figure takes the
# first name present.
VLLM_SERIES: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_ratio": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "prefix_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "prefix_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "generation_tokens": ("vllm:generation_tokens_total",),
}


@dataclass(frozen=True, slots=True)
class SlotState:
    """One llama-server slot: id, processing (True/False; None: not said), n_ctx (its
    context, tokens), tokens (held in its context now; None when idle or not said), decoded
    (tokens generated for the request it processes), task (the request's id in the server)."""

    id: int
    processing: bool | None
    n_ctx: int | None = None
    tokens: int | None = None
    decoded: int | None = None
    task: int | None = None


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """One model an Ollama-API engine holds: name, size and size_vram (bytes), context
    (tokens; None: not said), expires_at (the engine's wall-clock ISO time, as written)."""

    name: str
    size: int | None = None
    size_vram: int | None = None
    context: int | None = None
    expires_at: str | None = None

    def processor(self) -> str:
        """Where it runs, as `ollama ps`' PROCESSOR column prints it: "100% GPU", "100% CPU",
        "48%/52% CPU/GPU" (shares of its bytes, rounded); "?" when a size is missing or the
        VRAM figure exceeds the whole."""
        size, vram = self.size, self.size_vram
        if vram == 0:
            return "100% CPU"
        if size is None or vram is None or size <= 0 or vram > size:
            return "?"
        cpu = round(100 * (size - vram) / size)
        if cpu == 0:
            return "100% GPU"
        return f"{cpu}%/{100 - cpu}% CPU/GPU"

    def expires_in_s(self, now: datetime) -> float | None:
        """Seconds until the engine unloads it (negative: overdue), from `now` (wall clock,
        aware); None when the expiry is not said or not a time."""
        if not self.expires_at:
            return None
        try:
            when = datetime.fromisoformat(self.expires_at)
        except ValueError:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return (when - now).total_seconds()


@dataclass(frozen=True, slots=True)
class EngineState:
    """One reading of the engine's own figures.

    kind: "llama-server", "vllm" or "ollama"; url: the engine's root; t_ns: perf_counter_ns
    when the reading ended; wall_time: its wall-clock label (ISO, UTC). processing / waiting:
    requests the engine runs / queues (llama-server's processing and deferred, vLLM's
    running and waiting). kv_pct: KV cache in use, 0-100, with kv_source (which figure).
    tokens_per_s: tokens generated per second of wall time between this reading and the
    previous (all slots together). decode_tok_s: the server's per-request decode rate over
    the requests that finished since the previous reading (llama-server: predicted tokens
    over predicted seconds; None when none finished). prefix_hit_pct: vLLM's prefix-cache
    hits over queries since the previous reading. slots / models: llama-server's slots,
    an Ollama engine's loaded models (None: not read). counters: the raw counters the next
    reading's rates start from (not logged). notes: what was set aside or off.
    """

    kind: str
    url: str
    t_ns: int = 0
    wall_time: str = ""
    processing: float | None = None
    waiting: float | None = None
    kv_pct: float | None = None
    kv_source: str | None = None
    tokens_per_s: float | None = None
    decode_tok_s: float | None = None
    prefix_hit_pct: float | None = None
    slots: tuple[SlotState, ...] | None = None
    models: tuple[LoadedModel, ...] | None = None
    counters: Mapping[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def busy_slots(self) -> int | None:
        """Slots processing a request now (None: no slots read)."""
        if self.slots is None:
            return None
        return sum(1 for s in self.slots if s.processing)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for the session log's `engine_state` record: every field above but
        `counters` (the raw series the rates come from), absent figures as null."""
        return {
            "kind": self.kind, "url": self.url, "t_ns": self.t_ns, "wall_time": self.wall_time,
            "processing": self.processing, "waiting": self.waiting, "kv_pct": self.kv_pct,
            "kv_source": self.kv_source, "tokens_per_s": self.tokens_per_s,
            "decode_tok_s": self.decode_tok_s, "prefix_hit_pct": self.prefix_hit_pct,
            "slots": None if self.slots is None else [
                {"id": s.id, "processing": s.processing, "n_ctx": s.n_ctx, "tokens": s.tokens,
                 "decoded": s.decoded} for s in self.slots],
            "models": None if self.models is None else [
                {"name": m.name, "size": m.size, "size_vram": m.size_vram,
                 "context": m.context, "expires_at": m.expires_at,
                 "processor": m.processor()} for m in self.models],
            "notes": list(self.notes),
        }

    def same_figures(self, other: EngineState | None) -> bool:
        """Whether `other` holds the same figures (its time and rates aside): a reading
        that changed nothing is not logged again."""
        if other is None:
            return False
        mine, theirs = self.to_dict(), other.to_dict()
        for key in ("t_ns", "wall_time", "tokens_per_s", "decode_tok_s", "prefix_hit_pct"):
            mine.pop(key)
            theirs.pop(key)
        return mine == theirs and not self.tokens_per_s and not other.tokens_per_s


def _number(value: Any) -> float | None:
    """A finite number ≥ 0 (bools are not numbers), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None


def _whole(value: Any, limit: float = 2**32) -> int | None:
    number = _number(value)
    return int(number) if number is not None and number == int(number) and number < limit \
        else None


def parse_slots(answer: Any, notes: list[str]) -> tuple[SlotState, ...] | None:
    """llama-server's `/slots` answer → its slots (the module docstring says how the tokens
    a slot holds are counted); None when it is not a list (the route off: `--no-slots`)."""
    if not isinstance(answer, list):
        if answer is not None:
            notes.append("/slots: not a list of slots, set aside")
        return None
    out: list[SlotState] = []
    for entry in answer[:MAX_SLOTS]:
        if not isinstance(entry, Mapping):
            continue
        slot_id = _whole(entry.get("id"), MAX_SLOTS)
        if slot_id is None:
            notes.append("/slots: an entry without a slot number, set aside")
            continue
        busy = entry.get("is_processing")
        busy = busy if isinstance(busy, bool) else None
        decoded = tokens = None
        if busy:
            nxt = entry.get("next_token")
            first = nxt[0] if isinstance(nxt, list) and nxt else nxt
            decoded = _whole(first.get("n_decoded")) if isinstance(first, Mapping) else None
            parts = [_whole(entry.get(k)) for k in ("n_prompt_tokens_processed",
                                                      "n_prompt_tokens_cache")]
            summed = sum(p or 0 for p in (*parts, decoded))
            whole = _whole(entry.get("n_prompt_tokens"))
            tokens = max(whole or 0, summed) if whole is not None or summed else None
        out.append(SlotState(slot_id, busy, _whole(entry.get("n_ctx")), tokens, decoded,
                             _whole(entry.get("id_task"))))
    return tuple(out)


def prometheus_samples(text: str) -> dict[str, float]:
    """Every sample of a Prometheus text, by sample name, summed over label sets (one per
    served model), NaN and infinities left out. Raises ValueError for text that is not
    Prometheus'."""
    # imported on the first reading: the TUI's first frame does not wait for it (~15 ms)
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            value = float(sample.value)
            if math.isfinite(value):
                out[sample.name] = out.get(sample.name, 0.0) + value
    return out


def llama_figures(series: Mapping[str, float]) -> dict[str, Any]:
    """From llama-server's `/metrics` samples: processing, waiting (deferred), and the KV
    use where the build publishes it (`kv_cache_usage_ratio`, 0-1); the counters the rates
    come from are `counters`' (predicted tokens and seconds)."""
    out: dict[str, Any] = {
        "processing": _number(series.get("llamacpp:requests_processing")),
        "waiting": _number(series.get("llamacpp:requests_deferred")),
    }
    ratio = _number(series.get("llamacpp:kv_cache_usage_ratio"))
    if ratio is not None and ratio <= 1:
        out["kv_pct"], out["kv_source"] = 100 * ratio, "/metrics kv_cache_usage_ratio"
    return out


def vllm_figures(series: Mapping[str, float]) -> dict[str, Any]:
    """From vLLM's `/metrics` samples (VLLM_SERIES): running, waiting, KV use % (its
    0-1 ratio ×100)."""
    got = {key: next((series[n] for n in names if n in series), None)
           for key, names in VLLM_SERIES.items()}
    out: dict[str, Any] = {"processing": _number(got["running"]),
                           "waiting": _number(got["waiting"])}
    ratio = _number(got["kv_ratio"])
    if ratio is not None and ratio <= 1:
        out["kv_pct"], out["kv_source"] = 100 * ratio, "/metrics kv_cache_usage_perc"
    return out


def vllm_counters(series: Mapping[str, float]) -> dict[str, float]:
    """vLLM's counters the rates come from: generation_tokens, prefix_hits, prefix_queries."""
    out = {}
    for key in ("generation_tokens", "prefix_hits", "prefix_queries"):
        value = next((series[n] for n in VLLM_SERIES[key] if n in series), None)
        if _number(value) is not None:
            out[key] = float(value)  # type: ignore[arg-type]
    return out


def parse_ps(answer: Any, notes: list[str]) -> tuple[LoadedModel, ...] | None:
    """An Ollama-API `/api/ps` answer → the loaded models (name, sizes, context_length,
    expires_at); None when it has no `models` list."""
    models = answer.get("models") if isinstance(answer, Mapping) else None
    if not isinstance(models, list):
        if answer is not None:
            notes.append("/api/ps: no models list, set aside")
        return None
    out = []
    for entry in models[:MAX_MODELS]:
        if not isinstance(entry, Mapping):
            continue
        name = entry.get("name") or entry.get("model")
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_CHARS:
            notes.append("/api/ps: an entry without a usable name, set aside")
            continue
        expires = entry.get("expires_at")
        out.append(LoadedModel(name, _whole(entry.get("size"), 2**63),
                               _whole(entry.get("size_vram"), 2**63),
                               _whole(entry.get("context_length")),
                               expires if isinstance(expires, str) and len(expires) < 64
                               else None))
    return tuple(out)


def slots_kv(slots: tuple[SlotState, ...]) -> float | None:
    """The busy slots' tokens over every slot's context, % (None without contexts)."""
    total = sum(s.n_ctx or 0 for s in slots)
    if not total:
        return None
    return 100 * sum(s.tokens or 0 for s in slots if s.processing) / total


def with_rates(state: EngineState, before: EngineState | None) -> EngineState:
    """`state` with its rates against the reading `before` (None: none yet): tokens per
    second of wall time (llama-server: the busy slots' decoded tokens, plus those of requests
    that finished, from the predicted counter; vLLM: its generation counter), the server's
    own per-request decode rate over requests finished meanwhile, vLLM's prefix hit rate.
    A counter that went down (the engine restarted) gives no rate."""
    if before is None or state.t_ns <= before.t_ns:
        return state
    dt_s = (state.t_ns - before.t_ns) / 1e9
    now, was = state.counters, before.counters
    grown = {k: now[k] - was[k] for k in now if k in was and now[k] >= was[k]}
    changes: dict[str, Any] = {}
    if "generation_tokens" in grown:
        changes["tokens_per_s"] = grown["generation_tokens"] / dt_s
    if grown.get("prefix_queries"):
        changes["prefix_hit_pct"] = 100 * grown.get("prefix_hits", 0.0) / grown["prefix_queries"]
    if grown.get("predicted_seconds") and grown.get("predicted_tokens"):
        changes["decode_tok_s"] = grown["predicted_tokens"] / grown["predicted_seconds"]
    if state.slots is not None and before.slots is not None:
        changes["tokens_per_s"] = _slot_rate(state, before, grown) / dt_s
    return replace(state, **changes)


def _slot_rate(state: EngineState, before: EngineState, grown: Mapping[str, float]) -> float:
    """Tokens llama-server generated between two readings: each request still running
    counts its decoded tokens' growth; one that ended meanwhile counts through the predicted
    counter (which grows only as a request ends) less what the earlier reading had seen."""
    seen = {(s.id, s.task): s.decoded or 0 for s in before.slots or () if s.processing}
    made = 0.0
    ended = dict(seen)
    for slot in state.slots or ():
        key = (slot.id, slot.task)
        if slot.processing and slot.decoded is not None:
            made += slot.decoded - seen.get(key, 0) if slot.decoded >= seen.get(key, 0) else 0
            ended.pop(key, None)
    finished = grown.get("predicted_tokens", 0.0) - sum(ended.values())
    return made + max(finished, 0.0)


class StateReader:
    """Reads one engine's own figures (`read`), keeping the previous reading for the rates.

    kind: one of KINDS; url: the engine's root ("http://127.0.0.1:8080", no "/v1");
    client: an httpx client to read with (None: one of its own, closed by `aclose`);
    query: added to llama-server's routes: a router's "?model=…&autoload=false"
    (`llama_props.model_query`), whose /slots and /metrics are its model's.
    """

    def __init__(self, kind: str, url: str, client: httpx.AsyncClient | None = None,
                 query: str = "") -> None:
        if kind not in KINDS:
            raise ValueError(f"no live figures for a {kind!r} engine: only {', '.join(KINDS)}")
        self.kind = kind
        self.url = url.rstrip("/").removesuffix("/v1")
        self._own = client is None
        # its own client reads through the bounded transport (no compression asked; a
        # gzip bomb decoded in bounded pieces), as discovery's does
        self._client = client or httpx.AsyncClient(trust_env=False,
                                                   transport=BoundedTransport())
        self.last: EngineState | None = None
        self.query = query

    async def aclose(self) -> None:
        """Close the client it made (not one it was given)."""
        if self._own:
            await self._client.aclose()

    async def _get(self, route: str, as_json: bool) -> Any:
        """A route's JSON (or text), None for anything but a whole 200 answer of at most
        MAX_BODY_BYTES within READ_TIMEOUT_S (body included: a server that trickles bytes is
        not waited for, nor one whose body does not end)."""
        body = await read_whole(self._client, self.url + route, READ_TIMEOUT_S,
                                MAX_BODY_BYTES)
        if body is None:
            return None
        text = body.decode("utf-8", errors="replace")
        try:
            return json.loads(text) if as_json else text
        except (ValueError, RecursionError):
            return None

    async def read(self) -> EngineState:
        """One reading (its routes asked at once), with rates against the previous one.
        Never raises: a route that does not answer leaves its figures out, with a note."""
        notes: list[str] = []
        if self.kind == "ollama":
            state = EngineState(self.kind, self.url,
                                models=parse_ps(await self._get("/api/ps", True), notes))
            if state.models is None:
                notes.append("/api/ps did not answer")
        elif self.kind == "vllm":
            state = self._vllm(await self._get("/metrics", False), notes)
        else:
            slots, text = await asyncio.gather(self._get(f"/slots{self.query}", True),
                                               self._get(f"/metrics{self.query}", False))
            state = self._llama(slots, text, notes)
        wall = datetime.now(UTC).isoformat(timespec="milliseconds")
        state = replace(state, t_ns=time.perf_counter_ns(), wall_time=wall, notes=tuple(notes))
        state = with_rates(state, self.last)
        self.last = state
        return state

    def _series(self, text: Any, notes: list[str]) -> dict[str, float] | None:
        if not isinstance(text, str):
            notes.append("/metrics did not answer (llama-server needs --metrics)"
                         if self.kind == "llama-server" else "/metrics did not answer")
            return None
        try:
            return prometheus_samples(text)
        except ValueError:
            notes.append("/metrics: not Prometheus text, set aside")
            return None

    def _llama(self, slots_answer: Any, text: Any, notes: list[str]) -> EngineState:
        slots = parse_slots(slots_answer, notes)
        if slots_answer is None:
            notes.append("/slots did not answer (llama-server's --no-slots turns it off)")
        series = self._series(text, notes)
        figures = llama_figures(series) if series is not None else {}
        counters = {} if series is None else {
            k: series[n] for k, n in (("predicted_tokens", "llamacpp:tokens_predicted_total"),
                                      ("predicted_seconds",
                                       "llamacpp:tokens_predicted_seconds_total"))
            if _number(series.get(n)) is not None}
        if "kv_pct" not in figures and slots:
            kv = slots_kv(slots)
            if kv is not None:
                figures.update(kv_pct=kv, kv_source="/slots: busy slots' tokens / n_ctx")
        if series is None and slots is not None:  # /metrics off: the slots say who is busy
            figures["processing"] = float(sum(1 for s in slots if s.processing))
        return EngineState(self.kind, self.url, slots=slots, counters=counters, **figures)

    def _vllm(self, text: Any, notes: list[str]) -> EngineState:
        series = self._series(text, notes)
        if series is None:
            return EngineState(self.kind, self.url)
        return EngineState(self.kind, self.url, counters=vllm_counters(series),
                           **vllm_figures(series))


async def poll(reader: StateReader, on_state: Callable[[EngineState], Awaitable[None] | None],
               pace_s: float = PACE_S, *, idle_pace_s: float = IDLE_PACE_S,
               idle_after: int = IDLE_AFTER,
               sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
    """Read every `pace_s` seconds (from the start of one reading to the next: a slow answer
    shortens the wait, never piles readings up) and hand each to `on_state`, until
    cancelled; after `idle_after` readings in a row that changed nothing (`same_figures`:
    an idle engine), every `idle_pace_s` until one changes. A caller that knows work is
    starting (a request sent) starts a new poll rather than wait out the idle pace."""
    last: EngineState | None = None
    unchanged = 0
    while True:
        started = time.perf_counter()
        state = await reader.read()
        unchanged = unchanged + 1 if state.same_figures(last) else 0
        last = state
        result = on_state(state)
        if result is not None:
            await result
        pace = idle_pace_s if unchanged >= idle_after else pace_s
        await sleep(max(0.05, pace - (time.perf_counter() - started)))


# llmtop's decode against the engine's: beyond this the two differ by more than how they
# count. llmtop's decode is (tokens - 1) over first → last chunk at the client, the server's
# tokens over its own generation time: for the short replies of an interactive session (16+
# tokens) the count alone differs by up to 1/16 ≈ 6 %, and reading chunks through HTTP on a
# loaded machine adds a few % (measured on llama-server: docs/guide/screen.md); past 15 %
# the figures describe different work — the server's averages other clients' requests, or
# the client reads late.
DISAGREE_PCT = 15.0


def disagreement(client_tok_s: float | None, server_tok_s: float | None) -> str | None:
    """A line when llmtop's measured decode (tokens/s) and the engine's own differ by more
    than DISAGREE_PCT % of the engine's: "engine says 50.1 tok/s, llmtop measured 38.2
    (-24 %)"; None when they agree or either is absent (absent is not a disagreement)."""
    if not client_tok_s or not server_tok_s:
        return None
    diff = 100 * (client_tok_s - server_tok_s) / server_tok_s
    if abs(diff) <= DISAGREE_PCT:
        return None
    return (f"engine says {server_tok_s:.1f} tok/s decode, llmtop measured "
            f"{client_tok_s:.1f} ({diff:+.0f} %, over {DISAGREE_PCT:.0f} %)")


def kind_of(server: str | None, api: str) -> str | None:
    """The live-state kind for a connection: `server` is what the OpenAI server is
    ("llama-server", "vllm", …; None: unknown), `api` "ollama" or "openai". None: this
    engine publishes no live figures llmtop reads."""
    if api == "ollama":
        return "ollama"
    return server if server in ("llama-server", "vllm") else None
