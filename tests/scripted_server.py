"""A scripted Ollama-API server with known replies, for exact client-side checks.

Each model name is a scenario; the replies are fixed NDJSON lines. It runs under uvicorn in a
background thread on a free loopback port. Not an engine: the real one is tested separately.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from llmtop.engines.child import free_port

STATS = {
    "total_duration": 900_000_000,
    "load_duration": 1_000_000,
    "prompt_eval_count": 11,
    "prompt_eval_duration": 275_489_000,
    "eval_count": 3,
    "eval_duration": 40_000_000,
}


def chunk(content="", thinking=None, **extra):
    message = {"role": "assistant", "content": content}
    if thinking:
        message["thinking"] = thinking
    return {
        "model": "m",
        "created_at": "2026-01-01T00:00:00Z",
        "message": message,
        "done": False,
        **extra,
    }


SCENARIOS = {
    "ok": [
        chunk("Hel"),
        chunk("lo"),
        chunk("!"),
        chunk("", done=True, done_reason="stop", **STATS),
    ],
    # Ollama omits zero-valued stats: no load_duration, no prompt_eval_count
    "sparse": [
        chunk("a"),
        chunk("b"),
        chunk("", done=True, done_reason="stop", eval_count=2, eval_duration=10_000_000),
    ],
    "thinking": [
        chunk("", thinking="Let me"),
        chunk("", thinking=" think"),
        chunk("Yes"),
        chunk("", done=True, done_reason="stop", **STATS),
    ],
    "midstream-error": [
        chunk("par"),
        chunk("tial"),
        {"error": "model runner has unexpectedly stopped"},
    ],
    "truncated": [chunk("cut"), chunk(" off")],
    "load": [chunk("", done=True, done_reason="load")],
}


async def _chat(request: Request):
    body = await request.json()
    model = body.get("model")
    if model == "hang":

        async def hang():
            yield (json.dumps(chunk("x")) + "\n").encode()
            await asyncio.sleep(30)

        return StreamingResponse(hang(), media_type="application/x-ndjson")
    if model not in SCENARIOS:
        return JSONResponse({"error": f"model '{model}' not found"}, status_code=404)

    async def lines():
        for line in SCENARIOS[model]:
            yield (json.dumps(line) + "\n").encode()
            await asyncio.sleep(0.005)

    return StreamingResponse(lines(), media_type="application/x-ndjson")


async def _tags(_: Request):
    return JSONResponse(
        {
            "models": [
                {
                    "name": n,
                    "model": n,
                    "size": 1,
                    "digest": "d",
                    "modified_at": "2026-01-01T00:00:00Z",
                    "details": {},
                }
                for n in ("ok", "sparse")
            ]
        }
    )


async def _version(_: Request):
    return JSONResponse({"version": "0.0.0-scripted"})


class ScriptedServer:
    """Context manager: `with ScriptedServer() as url: ...` serves the scenarios at url."""

    def __init__(self) -> None:
        self.port = free_port()
        app = Starlette(
            routes=[
                Route("/api/chat", _chat, methods=["POST"]),
                Route("/api/tags", _tags),
                Route("/api/version", _version),
            ]
        )
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(5)
