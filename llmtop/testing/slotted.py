"""A scripted Ollama-API server with `c` slots and a known service time, for load tests.

Every `/api/chat` request waits for one of `slots` slots (FIFO, an `asyncio.Semaphore`),
then "prefills" for `prefill_s`, sends its first token, and sends the remaining tokens
`gap_s` apart; the done line comes with the last token. With T output tokens the service
time is

    S = prefill_s + (T − 1) × gap_s        (T = min(tokens, the request's num_predict))

so a load test can compute what it must measure: at closed-loop concurrency N with c slots,
throughput = min(N, c) / S, and a request that waits for a slot has whole service times
added to its TTFT. Every step sleeps until an absolute deadline on the loop's clock, so the
timer's lateness (epoll rounds timeouts up to 1 ms) never accumulates over a request.

The server counts prompt tokens like a tokenizer of one token per word plus
`TEMPLATE_TOKENS`, so llmtop's calibration converges on it. Its stats are Ollama's names in
ns, measured on its own clock (prefill: slot acquired → first token; eval: first → last
token); `total_duration` includes the wait for a slot, as Ollama's does (its handler times
the whole request), so total − prompt eval − eval is the queueing. With `prefill_s` and
`gap_s` 0 it never sleeps: a zero-latency server for measuring the client.

Serve it in a thread (`SlottedUpstream`, a context manager), as a child process
(`SlottedProcess`), or in the foreground
(`python -m llmtop.testing.slotted --port P --slots 2 --prefill-ms 20 --tokens 9 --gap-ms 10`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Self

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from llmtop.servers.child import ChildServer, watch_parent
from llmtop.testing.scripted import ROUTES, Script, ServeInThread, chunk

MODEL = "slotted"
TEMPLATE_TOKENS = 10  # what a chat template adds to the words, as a real tokenizer's would


@dataclass(frozen=True)
class Service:
    """The slotted server's behaviour: `slots` requests served at once; `prefill_s` seconds
    to the first token; `tokens` output tokens (fewer when num_predict says so) `gap_s`
    seconds apart."""

    slots: int = 1
    prefill_s: float = 0.02
    tokens: int = 9
    gap_s: float = 0.01

    def service_s(self, tokens: int | None = None) -> float:
        """S = prefill + (T − 1) × gap, in seconds, for T output tokens (default `tokens`)."""
        t = self.tokens if tokens is None else tokens
        return self.prefill_s + (max(t, 1) - 1) * self.gap_s


def prompt_tokens(body: dict[str, Any]) -> int:
    """The prompt's "token" count: one per whitespace-separated word of the messages, plus
    TEMPLATE_TOKENS."""
    words = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
    return words + TEMPLATE_TOKENS


class SlotState:
    """The slots and what they saw: `served` requests, `max_busy` slots busy at once."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.slots = asyncio.Semaphore(service.slots)
        self.busy = 0
        self.max_busy = 0
        self.served = 0


async def _serve(state: SlotState, body: dict[str, Any]) -> AsyncIterator[bytes]:
    """Wait for a slot, then replay the timed reply; the slot is freed when the reply ends
    (also when the client goes away)."""
    svc = state.service
    loop = asyncio.get_running_loop()
    arrived = loop.time()
    num_predict = (body.get("options") or {}).get("num_predict")
    tokens = svc.tokens if not num_predict or num_predict < 0 else min(svc.tokens, num_predict)
    async with state.slots:
        state.busy += 1
        state.max_busy = max(state.max_busy, state.busy)
        try:
            start = loop.time()
            first = start
            for i in range(tokens):
                delay = start + svc.prefill_s + i * svc.gap_s - loop.time()
                if delay > 0:  # a zero-latency server never touches the timer (1 ms steps)
                    await asyncio.sleep(delay)
                if i == 0:
                    first = loop.time()
                if i < tokens - 1:
                    yield json.dumps(chunk(f" w{i}")).encode() + b"\n"
            end = loop.time()
            stats: dict[str, Any] = {  # measured on the server's clock, never below 1 ns
                "total_duration": max(1, round((end - arrived) * 1e9)),
                "load_duration": 0,
                "prompt_eval_count": prompt_tokens(body),
                "prompt_eval_duration": max(1, round((first - start) * 1e9)),
                "eval_count": tokens,
                "eval_duration": max(1, round((end - first) * 1e9)),
            }
            last = chunk(f" w{tokens - 1}", done=True, done_reason="length", **stats)
            state.served += 1
            yield json.dumps(last).encode() + b"\n"
        finally:
            state.busy -= 1


async def _chat(request: Request) -> Response:
    body = await request.json()
    if body.get("model") != MODEL:
        return JSONResponse({"error": f"model '{body.get('model')}' not found"}, status_code=404)
    return StreamingResponse(
        _serve(request.app.state.slots, body), media_type="application/x-ndjson"
    )


async def _tags(_: Request) -> Response:
    return JSONResponse(
        {
            "models": [
                {
                    "name": MODEL,
                    "model": MODEL,
                    "size": 1,
                    "digest": "s",
                    "modified_at": "2026-01-01T00:00:00Z",
                    "details": {},
                }
            ]
        }
    )


async def _show(request: Request) -> Response:
    if (await request.json()).get("model") != MODEL:
        return JSONResponse({"error": "model not found"}, status_code=404)
    return JSONResponse(
        {
            "modelfile": "",
            "parameters": "",
            "template": "",
            "modified_at": "2026-01-01T00:00:00Z",
            "model_info": {},
            "details": {
                "family": "slotted",
                "parameter_size": "0M",
                "quantization_level": "none",
                "format": "none",
            },
        }
    )


def create_slotted_app(service: Service) -> Starlette:
    """The slotted server's app (`app.state.slots` is its SlotState); `/api/version`, `/api/ps`
    and `/` are the scripted server's."""
    ours = {"/api/chat": _chat, "/api/tags": _tags, "/api/show": _show}
    routes = [r for r in ROUTES if isinstance(r, Route) and r.path not in ours]
    routes += [
        Route("/api/chat", _chat, methods=["POST"]),
        Route("/api/tags", _tags),
        Route("/api/show", _show, methods=["POST"]),
    ]
    app = Starlette(routes=routes)
    app.state.script = Script()
    app.state.slots = SlotState(service)
    return app


class SlottedUpstream(ServeInThread):
    """The slotted server in a thread: `with SlottedUpstream(Service(slots=2)) as up:`;
    `up.url` is its base URL, `up.state` its SlotState."""

    def __init__(self, service: Service | None = None, port: int | None = None) -> None:
        self.service = service or Service()
        app = create_slotted_app(self.service)
        self.state: SlotState = app.state.slots
        super().__init__(app, port)

    def __enter__(self) -> Self:  # type: ignore[override]
        super().__enter__()
        return self


class SlottedProcess(ChildServer):
    """The slotted server as a child process (its own interpreter, so its timers never wait
    for the measuring process's GIL): `async with SlottedProcess(Service(slots=2)) as up:`,
    `up.url`; or `start()` / `stop()`."""

    label = "slotted test server"
    log_name = "slotted"

    def __init__(self, service: Service | None = None, port: int | None = None) -> None:
        super().__init__(port)
        self.service = service or Service()

    def args(self) -> list[str]:
        """`python -m llmtop.testing.slotted --port P --slots c --prefill-ms … …`."""
        s = self.service
        return [
            "llmtop.testing.slotted",
            "--port",
            str(self.port),
            "--slots",
            str(s.slots),
            "--prefill-ms",
            repr(s.prefill_s * 1e3),
            "--tokens",
            str(s.tokens),
            "--gap-ms",
            repr(s.gap_s * 1e3),
        ]


def main(argv: list[str] | None = None) -> None:
    """Serve the slotted server in the foreground (for benchmarks and Locust tests)."""
    p = argparse.ArgumentParser(prog="python -m llmtop.testing.slotted")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--slots", type=int, default=1)
    p.add_argument("--prefill-ms", type=float, default=20.0)
    p.add_argument("--tokens", type=int, default=9)
    p.add_argument("--gap-ms", type=float, default=10.0)
    p.add_argument("--parent-pid", type=int, help="exit when this process is gone")
    a = p.parse_args(argv)
    if a.parent_pid:
        watch_parent(a.parent_pid)
    service = Service(a.slots, a.prefill_ms / 1e3, a.tokens, a.gap_ms / 1e3)
    uvicorn.run(
        create_slotted_app(service),
        host="127.0.0.1",
        port=a.port,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
