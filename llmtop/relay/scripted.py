"""A scripted Ollama-API upstream with known replies and timings, for the relay's tests and
`bench/relay_overhead.py`. Not an engine: it generates nothing, it replays fixed chunks.

Each model name is a scenario (`SCENARIOS`, plus "timed", "slow" and "hang"); unknown names
get Ollama's 404 `{"error": "model 'x' not found"}`. Every streamed reply is recorded in
`Recorder` — including when its generator was closed, which is how a test sees that the relay
closed the upstream connection after its own client left.

Serve it in a thread (`ScriptedUpstream`, a context manager) or as a process
(`python -m llmtop.relay.scripted --port P [--first-ms 50 --chunks 20 --gap-ms 10]`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any, Self

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

STATS: dict[str, Any] = {
    "total_duration": 900_000_000,
    "load_duration": 1_000_000,
    "prompt_eval_count": 11,
    "prompt_eval_duration": 275_489_000,
    "eval_count": 3,
    "eval_duration": 40_000_000,
}


def chunk(content: str = "", thinking: str | None = None, **extra: Any) -> dict[str, Any]:
    """One /api/chat line as Ollama writes it."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if thinking:
        message["thinking"] = thinking
    return {"model": "m", "created_at": "2026-01-01T00:00:00Z", "message": message, "done": False, **extra}


SCENARIOS: dict[str, list[dict[str, Any]]] = {
    "ok": [chunk("Hel"), chunk("lo"), chunk("!"), chunk("", done=True, done_reason="stop", **STATS)],
    "sparse": [  # Ollama omits zero-valued stats
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
    "midstream-error": [chunk("par"), chunk("tial"), {"error": "model runner has unexpectedly stopped"}],
    "truncated": [chunk("cut"), chunk(" off")],
    "garbage": [chunk("x"), "this is not json"],  # type: ignore[list-item]
}
GAP_S = 0.005  # between the lines of SCENARIOS


@dataclass
class Timing:
    """The "timed" scenario: first chunk after first_s, then `chunks` more, gap_s apart."""

    first_s: float = 0.05
    chunks: int = 20
    gap_s: float = 0.01


@dataclass
class Recorder:
    """What the scripted upstream saw. Thread-safe enough for tests (appends, Events)."""

    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # perf_counter_ns when a streamed reply's generator ended, and whether it was cut short
    closed_ns: list[int] = field(default_factory=list)
    cut_short: list[bool] = field(default_factory=list)
    closed: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)

    def reset(self) -> None:
        """Forget everything seen so far."""
        self.requests.clear()
        self.closed_ns.clear()
        self.cut_short.clear()
        self.closed.clear()
        self.started.clear()


def _line(obj: Any) -> bytes:
    return (obj if isinstance(obj, str) else json.dumps(obj)).encode() + b"\n"


def create_scripted_app(timing: Timing | None = None, recorder: Recorder | None = None) -> Starlette:
    """The scripted upstream's app; `app.state.recorder` is its Recorder."""
    timing = timing or Timing()
    rec = recorder or Recorder()

    def generate_line(chat: bool, obj: Any) -> Any:
        if chat or not isinstance(obj, dict) or "message" not in obj:
            return obj
        out = {k: v for k, v in obj.items() if k != "message"}
        out["response"] = obj["message"]["content"]
        if obj["message"].get("thinking"):
            out["thinking"] = obj["message"]["thinking"]
        return out

    async def stream(request: Request, chat: bool) -> Response:
        body = await request.json()
        rec.requests.append((request.url.path, body))
        model = body.get("model")
        if model == "timed":
            script: list[tuple[float, Any]] = [(timing.first_s, chunk("t0"))]
            script += [(timing.gap_s, chunk(f" t{i}")) for i in range(1, timing.chunks)]
            script.append((timing.gap_s, chunk("", done=True, done_reason="stop", **{
                **STATS, "eval_count": timing.chunks})))
        elif model == "slow":
            script = [(0.05, chunk(f"s{i} ")) for i in range(600)]
        elif model == "hang":
            script = [(0.0, chunk("x")), (3600.0, chunk("never"))]
        elif model in SCENARIOS:
            script = [(GAP_S, line) for line in SCENARIOS[model]]
        else:
            return JSONResponse({"error": f"model '{model}' not found"}, status_code=404)

        async def lines() -> AsyncIterator[bytes]:
            finished = False
            rec.started.set()
            try:
                for delay, obj in script:
                    if delay:
                        await asyncio.sleep(delay)
                    yield _line(generate_line(chat, obj))
                finished = True
            finally:
                rec.closed_ns.append(perf_counter_ns())
                rec.cut_short.append(not finished)
                rec.closed.set()

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    async def chat_route(request: Request) -> Response:
        return await stream(request, chat=True)

    async def generate_route(request: Request) -> Response:
        return await stream(request, chat=False)

    async def tags(_: Request) -> Response:
        names = ["ok", "timed", "thinking", "slow"]
        return JSONResponse({"models": [{"name": n, "model": n, "size": 1, "digest": "d",
                                         "modified_at": "2026-01-01T00:00:00Z", "details": {}}
                                        for n in names]})

    async def show(request: Request) -> Response:
        model = (await request.json()).get("model")
        if model not in ("ok", "timed", "thinking", "slow"):
            return JSONResponse({"error": f"model '{model}' not found"}, status_code=404)
        return JSONResponse({"modelfile": "", "parameters": "", "template": "", "modified_at":
                             "2026-01-01T00:00:00Z", "model_info": {"general.architecture": "scripted"},
                             "details": {"family": "scripted", "parameter_size": "0M",
                                         "quantization_level": "none", "format": "none"}})

    async def ps(_: Request) -> Response:
        return JSONResponse({"models": []})

    async def version(_: Request) -> Response:
        return JSONResponse({"version": "0.0.0-scripted"})

    async def root(_: Request) -> Response:
        return PlainTextResponse("Ollama is running")

    app = Starlette(routes=[
        Route("/", root, methods=["GET", "HEAD"]),
        Route("/api/version", version),
        Route("/api/tags", tags),
        Route("/api/show", show, methods=["POST"]),
        Route("/api/ps", ps),
        Route("/api/chat", chat_route, methods=["POST"]),
        Route("/api/generate", generate_route, methods=["POST"]),
    ])
    app.state.recorder = rec
    return app


class ServeInThread:
    """Serve an ASGI app with uvicorn in a daemon thread on a free loopback port.

    `with ServeInThread(app) as url: ...`; streams still open at exit are cut after 1 s.
    """

    def __init__(self, app: Any, port: int | None = None) -> None:
        from llmtop.engines.child import free_port

        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error",
                                access_log=False, timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self.server.started:
            raise RuntimeError(f"the test server on port {self.port} did not start")
        return self.url

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(5)


class ScriptedUpstream(ServeInThread):
    """The scripted upstream in a thread: `with ScriptedUpstream() as up:` gives this object;
    `up.url` is its base URL, `up.recorder` what it saw."""

    def __init__(self, timing: Timing | None = None) -> None:
        self.recorder = Recorder()
        super().__init__(create_scripted_app(timing, self.recorder))

    def __enter__(self) -> Self:  # type: ignore[override]
        super().__enter__()
        return self


def main(argv: list[str] | None = None) -> None:
    """Serve the scripted upstream in the foreground (for benchmarks)."""
    p = argparse.ArgumentParser(prog="python -m llmtop.relay.scripted")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--first-ms", type=float, default=50.0)
    p.add_argument("--chunks", type=int, default=20)
    p.add_argument("--gap-ms", type=float, default=10.0)
    a = p.parse_args(argv)
    app = create_scripted_app(Timing(a.first_ms / 1e3, a.chunks, a.gap_ms / 1e3))
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
