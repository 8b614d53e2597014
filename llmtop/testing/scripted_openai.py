"""A scripted OpenAI-compatible server: each model name replays one stream shape byte for byte.

Not an engine: it replays fixed SSE bodies (`SCENARIOS`) written after the shapes in
docs/protocols.md, "OpenAI-compatible servers" — llama-server with `timings`, vLLM's
trailing and continuous usage, LM Studio's `stats`, Ollama's `/v1` with `delta.reasoning`,
llama-cpp-python's usage-less stream — plus the SSE details that break naive clients
(comments, CRLF, `data:` without a space, errors mid-stream, early `[DONE]`). A few names
answer with an HTTP error instead: "http-400", "http-500", "refuses-usage" (400 while the
request carries `stream_options`, the "no-usage" stream without it); an unknown name gets 404.
`LONG_SCENARIOS` ("pings": one token, then 10 s of keep-alive comments) are served by name
but left out of the tests that replay every scenario.

The model "timed" answers with known timings (`scripted.Timing`, given to `ScriptedOpenAI`):
streamed, its first text "t0" after `first_s`, then " t1" … one every `gap_s`, a finish chunk
and a llama-server-style usage chunk with `timings` (`timed_frames`); not streamed, the whole
answer after `first_s` and its tokens' gaps (its hand-over stamped in `Recorder.first_ns` as
a stream's first frame is). "timed" is also the one model of `/v1/completions`, in the
text-completion shape (`choices[0].text`), streamed or not. A scenario whose figures claim
time takes it (`PACED`); kind "llama-server-router" answers as a llama-server router
(`ROUTER_PROPS`).

A non-streamed request answers `usage.prompt_tokens` = `PROMPT_BASE_TOKENS` + the number of
words in the messages, so calibration through it has an exact, known token count.
`kind` picks the routes that identify a server (`/props`, `/version`, `/api/v0/models`,
`/openapi.json`); kind "vllm" also serves `/metrics`, whose histograms grow by
`VLLM_SECONDS` per streamed reply. Serve it with `ScriptedOpenAI` (a context manager, a thread).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from time import perf_counter_ns
from typing import Any, Self

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from llmtop.testing.scripted import Recorder, ServeInThread, Timing, recorded_body

PROMPT_BASE_TOKENS = 7  # the template's share of the scripted prompt count
GAP_S = 0.002  # between two writes of a scripted body
TIMINGS = {"cache_n": 2, "prompt_n": 9, "prompt_ms": 30.5, "prompt_per_token_ms": 3.39,
           "prompt_per_second": 295.1, "predicted_n": 3, "predicted_ms": 20.25,
           "predicted_per_token_ms": 10.125, "predicted_per_second": 98.8}

# llama-server's `prompt_progress` of the 11-token prompt (2 cached): at the start, at the end
PROGRESS = ({"total": 11, "cache": 2, "processed": 2, "time_ms": 0},
            {"total": 11, "cache": 2, "processed": 11, "time_ms": 30})


def data(obj: Any) -> bytes:
    """One SSE event `data: JSON` and its blank line (the OpenAI framing)."""
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunk(content: str | None = None, *, finish: str | None = None, role: str | None = None,
          **delta_extra: Any) -> dict[str, Any]:
    """A `chat.completion.chunk` with one choice; `delta_extra` adds delta fields
    (`reasoning_content`, `reasoning`)."""
    delta: dict[str, Any] = {**({"role": role} if role else {}), **delta_extra}
    if content is not None:
        delta["content"] = content
    return {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def usage(prompt: int, completion: int, cached: int | None = None) -> dict[str, Any]:
    """An OpenAI `usage` object (with `prompt_tokens_details` when `cached` is given)."""
    out: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                           "total_tokens": prompt + completion}
    if cached is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out


DONE = b"data: [DONE]\n\n"
PINGS = 5000  # the "pings" scenario's keep-alive comments, GAP_S apart (10 s)
HELLO = [data(chunk("Hel", role="assistant")), data(chunk("lo")), data(chunk("!"))]
SCENARIOS: dict[str, list[bytes]] = {
    # llama-server: role + first text in one write; usage chunk carries `timings`
    "llama-server": [
        data(chunk(None, role="assistant")) + data(chunk("Hel")), data(chunk("lo")),
        data(chunk("!")), data(chunk(None, finish="length")),
        data({"choices": [], "usage": usage(11, 3, cached=2), "timings": TIMINGS}), DONE],
    # llama-server asked for `return_progress` and `timings_per_token`, with a draft model:
    # two progress chunks without text, cumulative timings on every text chunk, the 2nd and
    # 3rd token in one write (accepted draft tokens arrive together), draft counts at the end
    "llama-server-spec": [
        data({**chunk(None, role="assistant"), "prompt_progress": PROGRESS[0]}),
        data({**chunk(None), "prompt_progress": PROGRESS[1]}),
        data({**chunk("Hel"), "timings": {**TIMINGS, "predicted_n": 1}}),
        data({**chunk("lo"), "timings": {**TIMINGS, "predicted_n": 2}})
        + data({**chunk("!"), "timings": {**TIMINGS, "predicted_n": 3}}),
        data(chunk(None, finish="length")),
        data({"choices": [], "usage": usage(11, 3, cached=2),
              "timings": {**TIMINGS, "draft_n": 4, "draft_n_accepted": 3}}), DONE],
    # vLLM: trailing usage chunk; or cumulative usage on every chunk
    "vllm": [*HELLO, data(chunk(None, finish="stop")),
             data({"choices": [], "usage": usage(12, 3)}), DONE],
    "vllm-continuous": [
        data({**chunk("Hel", role="assistant"), "usage": usage(12, 1)}),
        data({**chunk("lo"), "usage": usage(12, 2)}), data({**chunk("!"), "usage": usage(12, 3)}),
        data({**chunk(None, finish="stop"), "usage": usage(12, 3)}), DONE],
    # LM Studio: standard usage plus `stats` (seconds)
    "lm-studio": [*HELLO, data({**chunk(None, finish="stop"), "usage": usage(13, 3),
                                "stats": {"tokens_per_second": 150.0,
                                          "time_to_first_token": 0.125,
                                          "generation_time": 0.02, "stop_reason": "eosFound"}}),
                  DONE],
    # Ollama /v1: thinking under delta.reasoning, finish chunk, usage chunk
    "ollama-v1": [data(chunk("", role="assistant", reasoning="Let me")),
                  data(chunk("", reasoning=" think")), data(chunk("Yes")),
                  data(chunk("", finish="stop")), data({"choices": [], "usage": usage(14, 3)}),
                  DONE],
    "reasoning-content": [data(chunk(None, role="assistant", reasoning_content="Hm")),
                          data(chunk("Ok")), data(chunk(None, finish="stop")), DONE],
    # llama-cpp-python: role-only first chunk, no usage at all
    "no-usage": [data(chunk(None, role="assistant")), data(chunk("")), *HELLO[1:],
                 data(chunk(None, finish="stop")), DONE],
    "comments": [b": ping\n\n", b":\n\n", *HELLO, b": ping - 2026-01-01 00:00:00\n\n",
                 data(chunk(None, finish="stop")), DONE],
    "crlf": [d.replace(b"\n", b"\r\n") for d in [*HELLO, data(chunk(None, finish="stop")), DONE]],
    "no-space": [d.replace(b"data: ", b"data:") for d in
                 [*HELLO, data(chunk(None, finish="stop")), DONE]],
    "error-object": [*HELLO[:2], data({"error": {"message": "slot crashed", "type": "server_error",
                                                 "code": 500}})],
    "event-error": [*HELLO[:2], b'event: error\ndata: {"error": {"message": "out of memory"}}\n\n',
                    DONE],
    "done-early": [*HELLO[:2], DONE],  # llama-cpp-python interrupting for a waiting request
    "no-done": [*HELLO, data(chunk(None, finish="stop"))],
    "cut-off": HELLO[:2],
    "garbage": [HELLO[0], b"data: {not json\n\n"],
    # a whole answer whose body goes on after [DONE] (a comment, LINGER_S later): a client
    # that leaves at [DONE], as the official `openai` client does, left a finished answer
    "lingers": [*HELLO, data(chunk(None, finish="stop")), DONE, b": still open\n\n"],
}
# Streams too long for the tests that replay every scenario, served by name all the same:
# one token, then keep-alive comments GAP_S apart for 10 s (llama-server's
# --sse-ping-interval, much faster): each resets a read timeout, none is a token.
LONG_SCENARIOS: dict[str, list[bytes]] = {"pings": [HELLO[0], *[b": ping\n\n"] * PINGS]}
# A scenario whose figures claim time takes it (a server figure past llmtop's own clock is
# set aside: sessions/measure/telemetry.py): (the first frame's delay, the others'), in s.
# TIMINGS claim 30.5 ms of prompt and 20.25 ms of decode: the first frame after 31 ms, the
# stream 56 ms or more; LM Studio's stats 125 ms to the first token and 20 ms of generation.
PACED = {"llama-server": (0.031, 0.005), "llama-server-spec": (0.031, 0.005),
         "lm-studio": (0.126, 0.006)}
# Kind "vllm" adds VLLM_SECONDS to every stream: 30.5 ms of prefill, 62.5 ms end to end
VLLM_PACE = (0.031, 0.007)
LINGER_S = 5.0
HTTP_ERRORS = {
    "http-400": (400, {"error": {"code": 400, "type": "exceed_context_size_error",
                                 "message": "request (6027 tokens) exceeds the available context "
                                            "size (512 tokens), try increasing it"}}),
    "http-500": (500, {"error": {"message": "internal failure", "type": "server_error"}}),
}
MODELS = ("llama-server", "vllm", "no-usage", "ollama-v1")


def timed_frames(timing: Timing, shape: str = "chat") -> list[tuple[float, bytes]]:
    """The "timed" model's stream: (delay before it in s, SSE frame) — `timing.chunks` text
    frames ("t0", " t1", …; the first with the role), then the finish chunk and a usage chunk
    with llama-server `timings` (prompt 11 tokens, 2 cached; `chunks` predicted), each
    `gap_s` after the one before, and `[DONE]` with the usage chunk. shape: "chat"
    (`delta.content`) or "completions" (`choices[0].text`)."""
    def text(piece: str | None, finish: str | None = None, role: str | None = None) -> bytes:
        if shape == "completions":
            return data({"id": "c1", "object": "text_completion", "created": 1,
                         "model": "timed", "choices": [{"index": 0, "text": piece or "",
                                                        "logprobs": None,
                                                        "finish_reason": finish}]})
        return data(chunk(piece, finish=finish, role=role))

    frames = [(timing.first_s, text("t0", role="assistant"))]
    frames += [(timing.gap_s, text(f" t{i}")) for i in range(1, timing.chunks)]
    tail = data({"choices": [], "usage": usage(11, timing.chunks, cached=2),
                 "timings": timed_timings(timing)}) + DONE
    return [*frames, (timing.gap_s, text(None, finish="stop")), (timing.gap_s, tail)]


def timed_timings(timing: Timing) -> dict[str, Any]:
    """llama-server's `timings` of a "timed" answer: TIMINGS with `chunks` tokens predicted
    over the (chunks − 1) gaps between them, and a prompt time no longer than the wait for
    the first (first_s)."""
    return {**TIMINGS, "predicted_n": timing.chunks,
            "predicted_ms": (timing.chunks - 1) * timing.gap_s * 1e3,
            "prompt_ms": min(TIMINGS["prompt_ms"], timing.first_s * 1e3)}


def timed_answer(timing: Timing) -> str:
    """The whole text of a "timed" answer: "t0 t1 … t{chunks-1}"."""
    return " ".join(f"t{i}" for i in range(timing.chunks))


async def _replay(rec: Recorder, frames: list[tuple[float, bytes]]) -> Any:
    finished = False
    try:
        for i, (delay_s, frame) in enumerate(frames):
            await asyncio.sleep(delay_s)
            if i == 0:
                rec.first_ns.append(perf_counter_ns())
            yield frame
        finished = True
    finally:
        rec.cut_short.append(not finished)
        rec.closed.set()


class _Stamped(JSONResponse):
    """A JSON reply that stamps `recorder.first_ns` as it hands its body to the server (a
    stream's frames are stamped as they are yielded, the same point)."""

    def __init__(self, content: Any, recorder: Recorder) -> None:
        super().__init__(content)
        self.recorder = recorder

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def stamped(message: Any) -> None:
            if message["type"] == "http.response.body":
                self.recorder.first_ns.append(perf_counter_ns())
            await send(message)

        await super().__call__(scope, receive, stamped)


async def _timed_whole(request: Request, shape: str) -> Response:
    """The "timed" model's answer in one JSON body, after `first_s` and the decode of its
    tokens ((chunks − 1) gaps), stamped as a stream's first frame is."""
    timing: Timing = request.app.state.timing
    # the prompt and the decode its timings claim (timed_timings), then the whole body
    await asyncio.sleep(timing.first_s + (timing.chunks - 1) * timing.gap_s)
    text = timed_answer(timing)
    if shape == "completions":
        choice: dict[str, Any] = {"index": 0, "text": text, "logprobs": None,
                                  "finish_reason": "stop"}
        kind = "text_completion"
    else:
        choice = {"index": 0, "message": {"role": "assistant", "content": text},
                  "finish_reason": "stop"}
        kind = "chat.completion"
    body = {"id": "c1", "object": kind, "created": 1, "model": "timed", "choices": [choice],
            "usage": usage(11, timing.chunks, cached=2), "timings": timed_timings(timing)}
    return _Stamped(body, request.app.state.recorder)


async def _completions(request: Request) -> Response:
    """`/v1/completions`: the "timed" model only (404 for any other)."""
    body, rec = await recorded_body(request)
    if body.get("model") != "timed":
        return JSONResponse({"error": {"message": f"model '{body.get('model')}' not found",
                                       "type": "not_found_error", "code": 404}}, status_code=404)
    if not body.get("stream"):
        return await _timed_whole(request, "completions")
    frames = timed_frames(request.app.state.timing, "completions")
    return StreamingResponse(_replay(rec, frames), media_type="text/event-stream")


def _prompt_tokens(body: dict[str, Any]) -> int:
    words = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
    return PROMPT_BASE_TOKENS + words


async def _chat(request: Request) -> Response:
    body, rec = await recorded_body(request)
    model = body.get("model")
    if model == "timed":
        if not body.get("stream"):
            return await _timed_whole(request, "chat")
        request.app.state.served += 1
        frames = timed_frames(request.app.state.timing)
        return StreamingResponse(_replay(rec, frames), media_type="text/event-stream")
    if not body.get("stream"):
        return JSONResponse({"object": "chat.completion", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "x"},
             "finish_reason": "length"}], "usage": usage(_prompt_tokens(body), 1)})
    if model == "refuses-usage":
        if "stream_options" in body:
            return JSONResponse({"error": {"message": "unknown field: stream_options",
                                           "type": "invalid_request_error"}}, status_code=400)
        model = "no-usage"
    if model in HTTP_ERRORS:
        status, err = HTTP_ERRORS[model]
        return JSONResponse(err, status_code=status)
    script = SCENARIOS.get(model) or LONG_SCENARIOS.get(model)
    if script is None:
        return JSONResponse({"error": {"message": f"model '{model}' not found",
                                       "type": "not_found_error", "code": 404}}, status_code=404)
    request.app.state.served += 1
    first_s, gap_s = PACED.get(str(model)) or (
        VLLM_PACE if request.app.state.kind == "vllm" else (GAP_S, GAP_S))
    paced = [(first_s if i == 0 else gap_s, frame) for i, frame in enumerate(script)]
    if model == "lingers":  # the body ends LINGER_S after its [DONE]
        paced[-1] = (LINGER_S, paced[-1][1])
    return StreamingResponse(_replay(rec, paced), media_type="text/event-stream")


# vLLM's histograms grow by these seconds per served stream (vllm kind only)
VLLM_SECONDS = {"vllm:request_prefill_time_seconds": 0.0305,
                "vllm:request_decode_time_seconds": 0.02025,
                "vllm:e2e_request_latency_seconds": 0.0625}


async def _metrics(request: Request) -> Response:
    """Prometheus text as vLLM writes it: each histogram's `_sum` and `_count` so far."""
    n = request.app.state.served
    lines = []
    for name, seconds in VLLM_SECONDS.items():
        lines += [f"# HELP {name} scripted", f"# TYPE {name} histogram",
                  f'{name}_bucket{{le="+Inf",model_name="vllm"}} {n}.0',
                  f'{name}_sum{{model_name="vllm"}} {n * seconds!r}',
                  f'{name}_count{{model_name="vllm"}} {n}.0']
    return Response("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")


async def _models(request: Request) -> Response:
    meta = {"n_ctx": 4096, "n_params": 268098176, "size": 253231104, "ftype": "Q4_K - Medium"}
    return JSONResponse({"object": "list", "data": [
        {"id": m, "object": "model", **({"meta": meta} if request.app.state.kind ==
                                        "llama-server" else {})}
        for m in (*MODELS, *request.app.state.also_listed)]})


TEMPLATE = "<start_of_turn>user\n{}<end_of_turn>\n<start_of_turn>model\n"


async def _apply_template(request: Request) -> Response:
    """llama-server's `/apply-template`: the messages' text in a Gemma-like template."""
    messages = (await request.json()).get("messages", [])
    return JSONResponse({"prompt": "".join(TEMPLATE.format(m.get("content", ""))
                                           for m in messages)})


async def _tokenize(request: Request) -> Response:
    """llama-server's `/tokenize`: one scripted token per whitespace-separated piece (the
    template's markers included), plus a BOS when `add_special` is set."""
    body = await request.json()
    pieces = str(body.get("content", "")).replace("\n", " ").split()
    bos = [2] if body.get("add_special") else []
    return JSONResponse({"tokens": bos + list(range(100, 100 + len(pieces)))})


async def _stamps(request: Request) -> Response:
    """`GET /scripted/stamps`: the Recorder's `received_ns` and `first_ns` so far, for a test
    that runs this server as a process (perf_counter_ns is CLOCK_MONOTONIC on Linux: the
    same clock in every process)."""
    rec: Recorder = request.app.state.recorder
    return JSONResponse({"received_ns": rec.received_ns, "first_ns": rec.first_ns})


IDENTITY_ROUTES = {
    "llama-server": ("/props", {"build_info": "b1-scripted", "total_slots": 1}),
    "vllm": ("/version", {"version": "0.0.0-scripted"}),
    "lm-studio": ("/api/v0/models", {"object": "list", "data": []}),
    "llama-cpp-python": ("/openapi.json", {"info": {"title": "🦙 llama.cpp Python API",
                                                    "version": "0.0.0"}}),
}


# kind "llama-server-router": a llama-server router (started without a model) as
# tools/server/server-models.cpp answers: its own /props with placeholders, the model's own
# /props and /slots at ?model=NAME, for the one loaded model (ROUTER_LOADED) only
ROUTER_PROPS = {"role": "router", "max_instances": 4, "models_autoload": True,
                "model_alias": "llama-server", "model_path": "none",
                "default_generation_settings": {"params": {}, "n_ctx": 0},
                "build_info": "b2-scripted"}
ROUTER_LOADED = "llama-server"
ROUTED_PROPS = {"build_info": "b2-scripted", "model_path": "/models/llama-server.gguf",
                "total_slots": 2, "default_generation_settings": {"n_ctx": 2048}}
ROUTED_SLOTS = [{"id": 0, "n_ctx": 2048, "speculative": False, "is_processing": False},
                {"id": 1, "n_ctx": 2048, "speculative": False, "is_processing": False}]
NOT_LOADED = {"error": {"code": 400, "message": "model is not loaded",
                        "type": "invalid_request_error"}}


async def _router_props(request: Request) -> Response:
    """A router's `/props`: its own without ?model, the loaded model's with it."""
    model = request.query_params.get("model")
    if model is None:
        return JSONResponse(ROUTER_PROPS)
    return (JSONResponse(ROUTED_PROPS) if model == ROUTER_LOADED
            else JSONResponse(NOT_LOADED, status_code=400))


async def _router_slots(request: Request) -> Response:
    """A router's `/slots`: the loaded model's with ?model (none of its own: 404 without)."""
    model = request.query_params.get("model")
    if model is None:
        return JSONResponse({"error": {"code": 404, "message": "File Not Found"}},
                            status_code=404)
    return (JSONResponse(ROUTED_SLOTS) if model == ROUTER_LOADED
            else JSONResponse(NOT_LOADED, status_code=400))


def create_openai_app(kind: str = "openai-compatible", recorder: Recorder | None = None,
                      also_listed: tuple[str, ...] = (), timing: Timing | None = None) -> Starlette:
    """The scripted OpenAI server's app, answering as `kind` (a key of IDENTITY_ROUTES, or
    anything else for a server that identifies as none of them); `/v1/models` lists MODELS
    and then `also_listed` (scenarios a CLI test names with --model, e.g. ("pings",));
    `timing`: the "timed" model's (default `Timing()`)."""
    routes = [Route("/v1/models", _models), Route("/v1/chat/completions", _chat, methods=["POST"]),
              Route("/v1/completions", _completions, methods=["POST"]),
              Route("/scripted/stamps", _stamps)]
    if kind in IDENTITY_ROUTES:
        path, answer = IDENTITY_ROUTES[kind]
        routes.append(Route(path, lambda _r, a=answer: JSONResponse(a)))
    if kind == "vllm":
        routes.append(Route("/metrics", _metrics))
    if kind == "llama-server-router":
        routes += [Route("/props", _router_props), Route("/slots", _router_slots)]
    if kind == "llama-server":
        routes += [Route("/apply-template", _apply_template, methods=["POST"]),
                   Route("/tokenize", _tokenize, methods=["POST"])]
    app = Starlette(routes=routes)
    app.state.kind = "llama-server" if kind == "llama-server-router" else kind
    app.state.also_listed = also_listed
    app.state.served = 0
    app.state.recorder = recorder or Recorder()
    app.state.timing = timing or Timing()
    return app


class ScriptedOpenAI(ServeInThread):
    """`with ScriptedOpenAI(kind) as up:` — `up.url` its root URL, `up.recorder` what it saw;
    `also_listed`: create_openai_app's; `timing`: the "timed" model's (default `Timing()`: 50 ms,
    20 chunks 10 ms apart)."""

    def __init__(self, kind: str = "openai-compatible", also_listed: tuple[str, ...] = (),
                 timing: Timing | None = None) -> None:
        self.recorder = Recorder()
        super().__init__(create_openai_app(kind, self.recorder, also_listed, timing))

    def __enter__(self) -> Self:  # type: ignore[override]
        super().__enter__()
        return self


def main(argv: list[str] | None = None) -> None:
    """Serve the scripted OpenAI server in the foreground: `python -m
    llmtop.testing.scripted_openai --port P [--kind llama-server] [--first-ms 50 --chunks 20
    --gap-ms 10]` (the "timed" model's timing). A process of its own keeps its stamps free
    of the GIL of the process under test."""
    p = argparse.ArgumentParser(prog="python -m llmtop.testing.scripted_openai")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--kind", default="openai-compatible")
    p.add_argument("--first-ms", type=float, default=50.0)
    p.add_argument("--chunks", type=int, default=20)
    p.add_argument("--gap-ms", type=float, default=10.0)
    a = p.parse_args(argv)
    app = create_openai_app(a.kind, timing=Timing(a.first_ms / 1e3, a.chunks, a.gap_ms / 1e3))
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
