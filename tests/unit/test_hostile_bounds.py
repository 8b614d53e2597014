"""The bounds on every upstream path (docs/hostile-input.md, "Unbounded input from an
upstream"): `--token-timeout` through the real CLI, and the relay's and the Locust user's
reads of their upstream held to the same line, decompressed-size and chunk limits as the
engines' clients (stamping/bounds.py). Each upstream is a Starlette app of a few lines in a
thread; memory is measured with tracemalloc (every Python allocation, all threads), so the
figure does not depend on what earlier tests left in the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import os
import subprocess
import sys
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from llmtop import cli
from llmtop.engines.connection import Connection
from llmtop.engines.events import FailureKind, Status
from llmtop.engines.http import Peer
from llmtop.engines.openai import OpenAIEngine
from llmtop.engines.relay import RelayEngine
from llmtop.engines.timeouts import MAX_TOKEN_TIMEOUT_S, TOKEN_TIMEOUT_S
from llmtop.loadtest.stream import stream_chat
from llmtop.servers.relay.server import create_app
from llmtop.sessions.measure.request import RequestCollector, chat_messages
from llmtop.sessions.runners.recorder import SessionRecorder
from llmtop.stamping.blocking import arrival_transport
from llmtop.stamping.bounds import MAX_LINE_BYTES
from llmtop.testing.scripted import ServeInThread, chunk
from llmtop.testing.scripted_openai import ScriptedOpenAI

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
MiB = 2**20
HUGE_MIB = 100  # the over-long line, MiB without a newline: past the 16 MiB bound, and far
# enough past it that holding it whole (2 × 100 MiB with its copy) breaks the memory bound


def llmtop(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llmtop", *argv], env={**ENV, **env}, text=True,
                          capture_output=True, timeout=60, stdin=subprocess.DEVNULL, check=False)


# ---------------------------------------------------------------- --token-timeout, real CLI


@pytest.fixture(scope="module")
def openai():
    with ScriptedOpenAI(also_listed=("pings",)) as up:
        yield up


def test_token_timeout_ends_a_pinging_stream_as_stalled_through_run(openai, tmp_path):
    log = tmp_path / "pings.jsonl"
    done = llmtop("run", "--engine", "openai", "--host", f"{openai.url}/v1", "--model", "pings",
                  "--prompt", "hi", "--token-timeout", "2", "--log", str(log))
    # the server pings for 10 s: without the flag (300 s) the stream would end truncated
    # when the pings stop; with it, it ends stalled, 2 s after its one token (2 s, not less:
    # the one token must come within it on a loaded machine)
    assert done.returncode == 5, done.stderr  # ExitCode.REQUEST_FAILED
    assert "no token for 2 s after 1 chunks (keep-alive pings do not count)" in done.stderr
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert records[0]["type"] == "header" and records[0]["token_timeout_s"] == 2.0
    request = next(r for r in records if r["type"] == "request")
    assert (request["status"], request["error_kind"]) == ("error", "stalled")
    assert request["content"] == "Hel"


@pytest.mark.parametrize("value", ["0", "-1", "nan", "1e9", "inf", "soon"])
def test_a_bad_token_timeout_is_refused_before_anything_is_sent(openai, value):
    before = len(openai.recorder.requests)
    done = llmtop("run", "--engine", "openai", "--host", f"{openai.url}/v1", "--model", "pings",
                  "--prompt", "hi", "--token-timeout", value)
    assert done.returncode == 2
    assert (f"llmtop run: error: argument --token-timeout: {value!r} is not a number of "
            "seconds > 0 and <= 300: the read timeout (300 s) already ends a stream that "
            "sends nothing for that long, so this limit, which keep-alive pings cannot "
            "reset, can only be shorter") in done.stderr
    assert len(openai.recorder.requests) == before


def test_every_streaming_command_takes_the_flag_and_keeps_the_default():
    assert TOKEN_TIMEOUT_S == MAX_TOKEN_TIMEOUT_S == 300.0  # the read timeout, engines/http.py
    parser = cli.build_parser()
    for argv in (["run", "--prompt", "x"], ["bench"], ["load"]):
        assert parser.parse_args(argv).token_timeout == 300.0
        assert parser.parse_args([*argv, "--token-timeout", "2.5"]).token_timeout == 2.5
    # given before the subcommand, as the other engine flags, it is kept
    assert parser.parse_args(["--token-timeout", "7", "bench"]).token_timeout == 7.0
    args = parser.parse_args(["--token-timeout", "4"])
    args.thresholds, args.engine_pids = None, ()
    assert cli.tui_settings(args).token_timeout_s == 4.0
    shown = llmtop("run", "--help", COLUMNS="400").stdout  # one line per flag: nothing wrapped
    assert "--token-timeout SECONDS" in shown and "keep-alive pings" in shown


def test_the_recorder_of_the_tui_bench_and_load_applies_and_logs_its_token_timeout(openai,
                                                                                  tmp_path):
    # the TUI, bench and load measure through SessionRecorder.measure (run as well)
    async def go():
        engine = OpenAIEngine(f"{openai.url}/v1")
        try:
            recorder = SessionRecorder(Connection(engine, "pings", None, None),
                                       {"num_predict": 10}, tmp_path / "r.jsonl",
                                       token_timeout_s=1.0)
            measured = await recorder.measure("hi")
            recorder.close()
            return measured
        finally:
            await engine.aclose()

    measured = asyncio.run(go())
    assert measured.result.failure.kind == FailureKind.STALLED
    assert measured.result.failure.message.startswith("no token for 1 s after 1 chunks")
    header = json.loads((tmp_path / "r.jsonl").read_text().splitlines()[0])
    assert header["token_timeout_s"] == 1.0


# ---------------------------------------------------------------- the relay and Locust


async def _huge_line(_: Request) -> Response:
    async def body() -> AsyncIterator[bytes]:
        yield json.dumps(chunk("a")).encode() + b"\n"
        yield b'{"message": {"role": "assistant", "content": "'
        for _ in range(HUGE_MIB):
            yield b"x" * MiB
    return StreamingResponse(body(), media_type="application/x-ndjson")


async def _huge_sse(_: Request) -> Response:
    async def body() -> AsyncIterator[bytes]:
        yield FIRST_SSE
        yield b'data: {"choices": [{"index": 0, "delta": {"content": "'
        for _ in range(HUGE_MIB):
            yield b"x" * MiB
    return StreamingResponse(body(), media_type="text/event-stream")


async def _no_done(_: Request) -> Response:
    async def body() -> AsyncIterator[bytes]:
        for i in range(100_000):
            yield json.dumps(chunk(f"t{i} ")).encode() + b"\n"
            await asyncio.sleep(0)
    return StreamingResponse(body(), media_type="application/x-ndjson")


async def _blank_pings(_: Request) -> Response:
    async def body() -> AsyncIterator[bytes]:
        yield json.dumps(chunk("a")).encode() + b"\n"
        for _ in range(1000):  # 10 s of blank keep-alive lines, none an event
            yield b"\n"
            await asyncio.sleep(0.01)
    return StreamingResponse(body(), media_type="application/x-ndjson")


BOMB = gzip.compress(json.dumps(chunk("a")).encode() + b"\n" + b" " * (32 * MiB), 9)


async def _bomb(_: Request) -> Response:
    return Response(BOMB, media_type="application/x-ndjson", headers={"Content-Encoding": "gzip"})


ROUTES = {"huge-line": _huge_line, "no-done": _no_done, "pings": _blank_pings, "bomb": _bomb}


async def _chat(request: Request) -> Response:
    return await ROUTES[(await request.json())["model"]](request)


FIRST_SSE = b'data: {"choices": [{"index": 0, "delta": {"content": "a"}}]}\n\n'
SSE_BOMB = gzip.compress(FIRST_SSE + b" " * (32 * MiB), 9)  # ~33 KB on the wire


async def _sse_chat(request: Request) -> Response:
    if (await request.json())["model"] == "sse-bomb":  # gzipped though identity was asked
        return Response(SSE_BOMB, media_type="text/event-stream",
                        headers={"Content-Encoding": "gzip"})
    return await _huge_sse(request)


APP = Starlette(routes=[Route("/api/chat", _chat, methods=["POST"]),
                        Route("/v1/chat/completions", _sse_chat, methods=["POST"])])


@pytest.fixture(scope="module")
def upstream():
    with ServeInThread(APP) as url:
        yield url


@contextlib.contextmanager
def peak_mib():
    """The peak of Python's allocations inside the block, MiB, as `peak[0]`."""
    peak = [0.0]
    tracemalloc.start()
    try:
        yield peak
    finally:
        peak[0] = tracemalloc.get_traced_memory()[1] / MiB
        tracemalloc.stop()


def relayed(relay_url: str, upstream: str, model: str, num_predict: int = 50):
    async def go():
        engine = RelayEngine(relay_url, upstream=upstream)
        events = []
        try:
            async with contextlib.aclosing(engine.stream_chat(
                    model, chat_messages("hi"), options={"num_predict": num_predict})) as s:
                events = [e async for e in s]
        finally:
            await engine.aclose()
        return RequestCollector("hi", {}, model, events=events).finish()
    return asyncio.run(go())


@pytest.mark.parametrize(("api", "model"), [("ollama", "huge-line"), ("openai", "huge-sse"),
                                            ("openai", "sse-bomb")])
def test_the_relay_cuts_an_upstream_line_at_the_line_bound(upstream, api, model):
    base = upstream if api == "ollama" else f"{upstream}/v1"
    with ServeInThread(create_app(base, api=api)) as relay, peak_mib() as peak:
        result = relayed(relay, base, model)
    assert result.failure.kind == FailureKind.LIMIT
    assert "sent a line longer than 16 MiB: llmtop stopped reading it" in result.failure.message
    assert result.content == "a"  # the chunk before it relayed
    # the relay held at most a few times the bound (the upstream's 1 MiB writes and the
    # client's side included), not the 20 MiB line and its copies
    assert peak[0] < 4 * MAX_LINE_BYTES / MiB


def test_the_relay_stops_a_stream_past_num_predict(upstream):
    with ServeInThread(create_app(upstream)) as relay:
        result = relayed(relay, upstream, "no-done", num_predict=50)
    # 2 × 50 + 16 = 116 chunks allowed (stamping/bounds.chunk_limit): the 117th ends it
    assert result.metrics.text_chunks == 116
    assert result.failure.kind == FailureKind.PROTOCOL
    assert ("the server sent 117 chunks without ending the stream, though num_predict asked "
            "for 50 tokens: stopped reading") in result.failure.message


def locust_request(url: str, model: str, num_predict: int = 50, **kw):
    client = httpx.Client(base_url=url, trust_env=False, transport=arrival_transport(),
                          timeout=httpx.Timeout(30.0, connect=5.0))
    peer = Peer(url, "an Ollama server", "check --host")
    try:
        return stream_chat(client, peer, RequestCollector("hi", {"num_predict": num_predict},
                                                          model), **kw)
    finally:
        client.close()


def test_the_locust_user_cuts_a_line_and_a_gzip_bomb_at_the_bounds(upstream):
    for model in ("huge-line", "bomb"):
        with peak_mib() as peak:
            result = locust_request(upstream, model)
        assert result.failure.kind == FailureKind.LIMIT, model
        assert "llmtop stopped reading it" in result.failure.message
        assert result.content == "a"
        assert peak[0] < 4 * MAX_LINE_BYTES / MiB, model  # httpx joined the line before


def test_the_locust_user_stops_past_num_predict_and_after_the_token_timeout(upstream):
    past = locust_request(upstream, "no-done", num_predict=50)
    assert past.metrics.text_chunks == 117 and past.failure.kind == FailureKind.PROTOCOL
    stalled = locust_request(upstream, "pings", token_timeout_s=1.0)
    assert stalled.status == Status.ERROR and stalled.failure.kind == FailureKind.STALLED
    assert stalled.failure.message == ("no token for 1 s after 1 chunks (keep-alive pings do "
                                       "not count)")
