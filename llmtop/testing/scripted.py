"""A scripted Ollama-API server with known replies and timings, for tests and benchmarks.

Not an engine: it generates nothing, it replays fixed chunks. Each model name is a scenario
(`SCENARIOS`, plus "timed", "slow" and "hang"); unknown names get Ollama's 404
`{"error": "model 'x' not found"}`. `/api/chat` answers in chat shape, `/api/generate` in
generate shape. `/api/tags` lists `INSTALLED`; `/api/ps` answers what it was given (or
HTTP 500 when told to fail); `/api/version` says "0.0.0-scripted".

Every streamed reply is recorded in a `Recorder`, including when its generator was closed,
which is how a test sees that a client (or the relay) closed the connection early.

Serve it in a thread (`ScriptedUpstream`, a context manager) or as a process
(`python -m llmtop.testing.scripted --port P [--first-ms 50 --chunks 20 --gap-ms 10]`).
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

from llmtop.servers.child import free_port

VERSION = "0.0.0-scripted"
# The done line's figures: durations within the time the scripted replies take (a server
# figure past llmtop's own clock is set aside: sessions/measure/telemetry.py). The "ok"
# reply's first text comes GAP_S (5 ms) after the request and its done line 20 ms after it:
# 1 ms load + 2.75489 ms prompt before the first, 10 ms of decode for the 3 tokens' 2 gaps.
STATS: dict[str, Any] = {
    "total_duration": 15_000_000,
    "load_duration": 1_000_000,
    "prompt_eval_count": 11,
    "prompt_eval_duration": 2_754_890,
    "eval_count": 3,
    "eval_duration": 10_000_000,
}
INSTALLED = ("ok", "timed", "thinking", "slow")  # what /api/tags and /api/show know
# An Ollama cloud model's name (its tag ends "-cloud"): it answers as "ok" does, and its
# /api/show names where it runs (`remote_host`, `remote_model`); listed when a Script has it
# in `also_installed`
CLOUD = "gpt-oss:120b-cloud"
CLOUD_SHOW = {"remote_model": "gpt-oss:120b", "remote_host": "https://ollama.com:443"}
GAP_S = 0.005  # between the lines of SCENARIOS
STARTUP_TIMEOUT_S = 10.0


# What the "escapes" scenario streams: OSC 0 (window title), CSI 2J + CSI H (clear, home),
# OSC 52 (clipboard write), OSC 8 (a link), C1 CSI (U+009B), a bidi override, a lone surrogate.
ESCAPES = (
    "A\x1b]0;PWNED\x07B",
    "\x1b[2J\x1b[HC\x1b]52;c;cHduZWQ=\x07",
    "\x1b]8;;http://evil.example/\x1b\\link\x1b]8;;\x1b\\\x9b31m",
    "D\u202eE\ud800F",
)


def chunk(content: str = "", thinking: str | None = None, **extra: Any) -> dict[str, Any]:
    """One /api/chat line as Ollama writes it."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if thinking:
        message["thinking"] = thinking
    return {"model": "m", "created_at": "2026-01-01T00:00:00Z", "message": message,
            "done": False, **extra}


SCENARIOS: dict[str, list[Any]] = {
    "ok": [
        chunk("Hel"), chunk("lo"), chunk("!"), chunk("", done=True, done_reason="stop", **STATS)
    ],
    "sparse": [  # Ollama omits zero-valued stats: no load_duration, no prompt_eval_count
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
        chunk("par"), chunk("tial"), {"error": "model runner has unexpectedly stopped"}
    ],
    "truncated": [chunk("cut"), chunk(" off")],
    "garbage": [chunk("x"), "this is not json"],
    "load": [chunk("", done=True, done_reason="load")],  # a load-only reply: nothing generated
    # An answer full of terminal control sequences (docs/hostile-input.md, "Text from
    # outside"): each would retitle the window, clear the screen, write the clipboard, hide a
    # link or reorder text if a terminal obeyed it; and a lone surrogate, a UTF-16 half.
    "escapes": [
        chunk(ESCAPES[0]), chunk(ESCAPES[1]), chunk(ESCAPES[2]), chunk(ESCAPES[3]),
        chunk("", done=True, done_reason="stop", **STATS),
    ],
    "escapes-error": [chunk("par"), {"error": "runner died\x1b]0;PWNED\x07\x1b[2J"}],
}


@dataclass
class Timing:
    """The "timed" scenario: first chunk after first_s, then `chunks - 1` more, gap_s apart,
    then the done chunk gap_s later (seconds)."""

    first_s: float = 0.05
    chunks: int = 20
    gap_s: float = 0.01


@dataclass
class Recorder:
    """What the scripted server saw. Thread-safe enough for tests (appends, Events).

    requests: (path, JSON body) of every streamed request. closed_ns: perf_counter_ns when a
    streamed reply's generator ended; cut_short: whether it ended before its script did.
    received_ns / first_ns: perf_counter_ns when each streamed request's handler started and
    when its first line was handed to the server to write (the truth a proxy's TTFT is
    checked against).
    """

    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    received_ns: list[int] = field(default_factory=list)
    first_ns: list[int] = field(default_factory=list)
    closed_ns: list[int] = field(default_factory=list)
    cut_short: list[bool] = field(default_factory=list)
    closed: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)

    def reset(self) -> None:
        """Forget everything seen so far."""
        self.requests.clear()
        self.received_ns.clear()
        self.first_ns.clear()
        self.closed_ns.clear()
        self.cut_short.clear()
        self.closed.clear()
        self.started.clear()


@dataclass
class Script:
    """How the server answers: the "timed" scenario's timing, `/api/ps`'s reply
    (`ps_error` set → HTTP 500 `{"error": ps_error}` instead), and the scenarios listed as
    installed after INSTALLED (`also_installed`, e.g. ("escapes",))."""

    timing: Timing = field(default_factory=Timing)
    also_installed: tuple[str, ...] = ()
    ps: dict[str, Any] = field(default_factory=lambda: {"models": []})
    ps_error: str | None = None


def timed_stats(timing: Timing) -> dict[str, Any]:
    """The "timed" reply's done-line figures: STATS with `chunks` tokens decoded over the
    (chunks − 1) gaps between them and a total of the reply's length (first_s + chunks gaps,
    the done line's included)."""
    return {**STATS, "eval_count": timing.chunks,
            "eval_duration": round((timing.chunks - 1) * timing.gap_s * 1e9),
            "total_duration": round((timing.first_s + timing.chunks * timing.gap_s) * 1e9)}


def _script_for(model: Any, timing: Timing) -> list[tuple[float, Any]] | None:
    """(delay before it in s, line) for each line of `model`'s reply; None for an unknown model."""
    if model == "timed":
        lines = [(timing.first_s, chunk("t0"))]
        lines += [(timing.gap_s, chunk(f" t{i}")) for i in range(1, timing.chunks)]
        done = chunk("", done=True, done_reason="stop", **timed_stats(timing))
        return [*lines, (timing.gap_s, done)]
    if model == "slow":  # 30 s of chunks: long enough to be cut short by any test
        return [(0.05, chunk(f"s{i} ")) for i in range(600)]
    if model == "hang":
        return [(0.0, chunk("x")), (3600.0, chunk("never"))]
    if model in SCENARIOS or model == CLOUD:
        return [(GAP_S, line) for line in SCENARIOS[model if model != CLOUD else "ok"]]
    return None


def _as_generate(obj: Any) -> Any:
    """A chat-shaped line in /api/generate's shape (text under "response")."""
    if not isinstance(obj, dict) or "message" not in obj:
        return obj
    out = {k: v for k, v in obj.items() if k != "message"}
    out["response"] = obj["message"]["content"]
    if obj["message"].get("thinking"):
        out["thinking"] = obj["message"]["thinking"]
    return out


def _not_found(model: Any) -> Response:
    return JSONResponse({"error": f"model '{model}' not found"}, status_code=404)


async def _replay(rec: Recorder, script: list[tuple[float, Any]], chat: bool,
                  ) -> AsyncIterator[bytes]:
    """Yield the script's lines after their delays, in the endpoint's shape, and record when
    (and whether early) the reply ended."""
    finished = False
    rec.started.set()
    try:
        for i, (delay, obj) in enumerate(script):
            if delay:
                await asyncio.sleep(delay)
            line = obj if chat else _as_generate(obj)
            if i == 0:
                rec.first_ns.append(perf_counter_ns())
            yield (line if isinstance(line, str) else json.dumps(line)).encode() + b"\n"
        finished = True
    finally:
        rec.closed_ns.append(perf_counter_ns())
        rec.cut_short.append(not finished)
        rec.closed.set()


async def recorded_body(request: Request) -> tuple[Any, Recorder]:
    """The request's JSON body and the app's Recorder, the request noted in it: its arrival
    (perf_counter_ns, stamped before the body is read) and its path and body."""
    received = perf_counter_ns()
    body = await request.json()
    rec: Recorder = request.app.state.recorder
    rec.received_ns.append(received)
    rec.requests.append((request.url.path, body))
    return body, rec


async def _stream(request: Request) -> Response:
    body, rec = await recorded_body(request)
    model = body.get("model")
    script = _script_for(model, request.app.state.script.timing)
    if script is None:
        return _not_found(model)
    chat = request.url.path == "/api/chat"
    return StreamingResponse(_replay(rec, script, chat), media_type="application/x-ndjson")


def _installed(request: Request) -> tuple[str, ...]:
    return (*INSTALLED, *request.app.state.script.also_installed)


async def _tags(request: Request) -> Response:
    return JSONResponse({"models": [
        {"name": n, "model": n, "size": 1, "digest": "d", "modified_at": "2026-01-01T00:00:00Z",
         "details": {}}
        for n in _installed(request)
    ]})


async def _show(request: Request) -> Response:
    model = (await request.json()).get("model")
    if model not in _installed(request):
        return _not_found(model)
    return JSONResponse({
        "modelfile": "", "parameters": "", "template": "", "modified_at": "2026-01-01T00:00:00Z",
        "model_info": {"general.architecture": "scripted"},
        "details": {"family": "scripted", "parameter_size": "0M", "quantization_level": "none",
                    "format": "none"},
        "capabilities": ["completion", "thinking"] if model == "thinking" else ["completion"],
        **(CLOUD_SHOW if model == CLOUD else {}),
    })


async def _ps(request: Request) -> Response:
    script: Script = request.app.state.script
    if script.ps_error is not None:
        return JSONResponse({"error": script.ps_error}, status_code=500)
    return JSONResponse(script.ps)


async def _version(_: Request) -> Response:
    return JSONResponse({"version": VERSION})


async def _root(_: Request) -> Response:
    return PlainTextResponse("Ollama is running")


ROUTES = [
    Route("/", _root, methods=["GET", "HEAD"]),
    Route("/api/version", _version),
    Route("/api/tags", _tags),
    Route("/api/show", _show, methods=["POST"]),
    Route("/api/ps", _ps),
    Route("/api/chat", _stream, methods=["POST"]),
    Route("/api/generate", _stream, methods=["POST"]),
]


def create_scripted_app(script: Script | None = None,
                        recorder: Recorder | None = None) -> Starlette:
    """The scripted server's app; `app.state.recorder` is its Recorder, `app.state.script`
    its Script."""
    app = Starlette(routes=ROUTES)
    app.state.script = script or Script()
    app.state.recorder = recorder or Recorder()
    return app


class ServeInThread:
    """Serve an ASGI app with uvicorn in a daemon thread on a free loopback port.

    `with ServeInThread(app) as url: ...`; streams still open at exit are cut after 1 s.
    `settings`: more `uvicorn.Config` settings (e.g. server_header=False). Raises RuntimeError
    when the server has not started within 10 s. (`llmtop watch` is no ASGI app: its own
    thread server is testing/watch.py's.)
    """

    def __init__(self, app: Any, port: int | None = None, **settings: Any) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error",
                                access_log=False, timeout_graceful_shutdown=1, **settings)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self.server.started:
            raise RuntimeError(f"the test server on port {self.port} did not start")
        return self.url

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(5)


class ScriptedUpstream(ServeInThread):
    """The scripted server in a thread: `with ScriptedUpstream() as up:` gives this object;
    `up.url` is its base URL, `up.recorder` what it saw. Keyword arguments are `Script`'s."""

    def __init__(self, timing: Timing | None = None, **script: Any) -> None:
        self.recorder = Recorder()
        self.script = Script(timing or Timing(), **script)
        super().__init__(create_scripted_app(self.script, self.recorder))

    def __enter__(self) -> Self:  # type: ignore[override]
        super().__enter__()
        return self


def main(argv: list[str] | None = None) -> None:
    """Serve the scripted server in the foreground (for benchmarks)."""
    p = argparse.ArgumentParser(prog="python -m llmtop.testing.scripted")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--first-ms", type=float, default=50.0)
    p.add_argument("--chunks", type=int, default=20)
    p.add_argument("--gap-ms", type=float, default=10.0)
    a = p.parse_args(argv)
    app = create_scripted_app(Script(Timing(a.first_ms / 1e3, a.chunks, a.gap_ms / 1e3)))
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
