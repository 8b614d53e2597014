"""A scripted Ollama-API server whose prefill is a known quadratic in the prompt's tokens, with
an optional one-slot prefix cache: for the prefill curve, the cache pairs and conversations.

Tokens: like the slotted server's (`slotted.prompt_tokens`), `TEMPLATE_TOKENS` template
tokens then one token per whitespace-separated word of every message, in order. A request
of T tokens of which n come from the cache takes

    prefill(T, n) = a + b·(T − n) + c·(T² − n²)   ms        (n = 0: a + b·T + c·T²)

— the work of the tokens not cached, each attending to every token before it — so the
saving per cached token, (prefill(T, 0) − prefill(T, n)) / n, is exactly b + c·n. The
cache is one slot, as a llama.cpp slot: the last request's prompt tokens followed by the
words it generated; n is the longest common prefix with it, at most T − 1 (an engine always
evaluates at least one token).

The done line reports the scripted prefill as `prompt_eval_duration` (the work the script
says it did, exact to the ns; the sleep that stands for it wakes up to a few ms late, which
only the client's TTFT sees), and the prompt count the way `cache_report` says:
"count" — only the tokens it evaluated (T − n: what the issue calls Ollama's smaller
`prompt_eval_count`), "none" — all T, cache or not (the embedded engine's and current
Ollama's semantics: the hit shows only in the time). Output: `tokens` words `gap_s` apart
(fewer when num_predict says so); `num_ctx` bounds the context: a longer prompt keeps its
last num_ctx − 1 tokens and reports that count (as the embedded engine does).

`with ContextUpstream(Prefill(20, 0.8, 4e-4), cache="count") as up:` serves it in a thread.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Self

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from llmtop.testing.scripted import ROUTES, Script, ServeInThread, chunk
from llmtop.testing.slotted import MODEL, TEMPLATE_TOKENS, _show, _tags

CacheReport = Literal["count", "none"]


@dataclass(frozen=True)
class Prefill:
    """prefill(T) = a + b·T + c·T² ms (a: ms, b: ms/token, c: ms/token²)."""

    a: float = 20.0
    b: float = 0.8
    c: float = 4e-4

    def ms(self, tokens: int, cached: int = 0) -> float:
        """The prefill of `tokens` prompt tokens of which `cached` come from the cache, ms."""
        return self.a + self.b * (tokens - cached) + self.c * (tokens**2 - cached**2)


def prompt_token_list(body: dict[str, Any], template: str = "chat") -> list[str]:
    """The request's tokens: TEMPLATE_TOKENS template tokens, then every message's words;
    with `template` "prompt" (Ollama's default `{{ .Prompt }}`, a model with no chat template)
    only the user messages' words: system messages and answers are dropped."""
    tokens = [f"<t{i}>" for i in range(TEMPLATE_TOKENS)]
    for message in body.get("messages", []):
        if template == "prompt" and message.get("role") != "user":
            continue
        tokens += str(message.get("content", "")).split()
    return tokens


def common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    """How many leading tokens `a` and `b` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass
class ContextState:
    """The server's behaviour and memory: `cached` is the cache slot's tokens (empty without a
    cache), `seen` the (T, n cached, prefill ms) of every request served."""

    prefill: Prefill
    cache: CacheReport | None = None
    tokens: int = 4
    gap_s: float = 0.002
    num_ctx: int = 1 << 20
    template: str = "chat"  # or "prompt": prompt_token_list
    cached: list[str] = field(default_factory=list)
    seen: list[tuple[int, int, float]] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


async def _serve(state: ContextState, body: dict[str, Any]) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    async with state.lock:  # one slot: requests are served one at a time
        start = loop.time()
        prompt = prompt_token_list(body, state.template)[-(state.num_ctx - 1) :]
        total = len(prompt)
        cached = min(common_prefix(prompt, state.cached), total - 1) if state.cache else 0
        prefill_ms = state.prefill.ms(total, cached)
        state.seen.append((total, cached, prefill_ms))
        num_predict = (body.get("options") or {}).get("num_predict")
        n_out = (
            state.tokens if not num_predict or num_predict < 0 else min(state.tokens, num_predict)
        )
        words = [f"w{i}" for i in range(n_out)]
        first = start + prefill_ms / 1e3
        for i, word in enumerate(words):
            delay = first + i * state.gap_s - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if i < n_out - 1:
                yield json.dumps(chunk(f" {word}")).encode() + b"\n"
        if state.cache:
            state.cached = prompt + words
        counted = total - cached if state.cache == "count" else total
        stats: dict[str, Any] = {
            "total_duration": max(1, round((loop.time() - start) * 1e9)),
            "load_duration": 0,
            "prompt_eval_count": counted,
            "prompt_eval_duration": round(prefill_ms * 1e6),
            "eval_count": n_out,
            "eval_duration": max(1, round((n_out - 1) * state.gap_s * 1e9)),
        }
        last = chunk(f" {words[-1]}", done=True, done_reason="length", **stats)
        yield json.dumps(last).encode() + b"\n"


async def _chat(request: Request) -> Response:
    body = await request.json()
    if body.get("model") != MODEL:
        return JSONResponse({"error": f"model '{body.get('model')}' not found"}, status_code=404)
    return StreamingResponse(
        _serve(request.app.state.context, body), media_type="application/x-ndjson"
    )


def create_context_app(state: ContextState) -> Starlette:
    """The app (`app.state.context` is its ContextState); `/api/version`, `/api/ps` and `/`
    are the scripted server's, `/api/tags` and `/api/show` the slotted server's."""
    ours = {"/api/chat", "/api/tags", "/api/show", "/api/generate"}
    routes = [r for r in ROUTES if isinstance(r, Route) and r.path not in ours]
    routes += [
        Route("/api/chat", _chat, methods=["POST"]),
        Route("/api/tags", _tags),
        Route("/api/show", _show, methods=["POST"]),
    ]
    app = Starlette(routes=routes)
    app.state.script = Script()
    app.state.context = state
    return app


class ContextUpstream(ServeInThread):
    """The server in a thread: `with ContextUpstream(Prefill(...), cache="count") as up:`;
    `up.url` its base URL, `up.state` its ContextState (what it served). Keyword arguments
    are ContextState's (tokens, gap_s, num_ctx)."""

    def __init__(
        self, prefill: Prefill | None = None, cache: CacheReport | None = None, **behaviour: Any
    ) -> None:
        self.state = ContextState(prefill or Prefill(), cache, **behaviour)
        super().__init__(create_context_app(self.state))

    def __enter__(self) -> Self:  # type: ignore[override]
        super().__enter__()
        return self
