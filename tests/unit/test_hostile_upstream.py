"""Unbounded input from an upstream (docs/hostile-input.md, "Unbounded input from an
upstream"): a line without end, a gzip bomb, a stream that never sends `done`, keep-alive
pings without a token, and counts no stream can have. Each is a test double of a few lines
(a Starlette app in a thread) that makes the case exact, read through the real engines and
`run_request`, as `llmtop run` reads them.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import resource
import zlib
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from llmtop.engines.events import FailureKind, ServerStats, Status, StreamEvent
from llmtop.engines.ollama import OllamaEngine
from llmtop.engines.openai import OpenAIEngine
from llmtop.sessions.measure.request import RequestCollector, run_request
from llmtop.sessions.measure.timeline import compute_metrics
from llmtop.stamping import bounds
from llmtop.stamping.bounds import chunk_limit
from llmtop.testing.scripted import STATS, ServeInThread, chunk

MiB = 2**20


def line(obj: object) -> bytes:
    return json.dumps(obj).encode() + b"\n"


async def _huge_line(_: Request) -> Response:
    async def body() -> AsyncIterator[bytes]:
        yield line(chunk("a"))
        yield b'{"message": {"role": "assistant", "content": "'
        for _ in range(100):  # 100 MiB without a newline, unless the client stops reading
            yield b"x" * MiB
    return StreamingResponse(body(), media_type="application/x-ndjson")


BOMB = gzip.compress(line(chunk("a")) + b" " * (512 * MiB), compresslevel=9)  # ~0.5 MB


async def _bomb(_: Request) -> Response:
    return Response(BOMB, media_type="application/x-ndjson",
                    headers={"Content-Encoding": "gzip"})


async def _brotli(_: Request) -> Response:
    return Response(b"\x00\x01", headers={"Content-Encoding": "br"})


async def _gzip_ok(_: Request) -> Response:
    body = line(chunk("a")) + line(chunk("", done=True, done_reason="stop", **STATS))
    return Response(gzip.compress(body), media_type="application/x-ndjson",
                    headers={"Content-Encoding": "gzip"})


async def _no_done(_: Request) -> Response:
    async def body() -> AsyncIterator[bytes]:
        for i in range(100_000):
            yield line(chunk(f"t{i} "))
            await asyncio.sleep(0)
    return StreamingResponse(body(), media_type="application/x-ndjson")


async def _pings(_: Request) -> Response:
    async def body() -> AsyncIterator[bytes]:
        yield b'data: {"choices": [{"index": 0, "delta": {"content": "a"}}]}\n\n'
        for _ in range(600):  # a minute of pings, each resetting the read timeout
            yield b": ping\n\n"
            await asyncio.sleep(0.1)
    return StreamingResponse(body(), media_type="text/event-stream")


ROUTES = {"huge-line": _huge_line, "bomb": _bomb, "brotli": _brotli, "gzip-ok": _gzip_ok,
          "no-done": _no_done}


async def _chat(request: Request) -> Response:
    return await ROUTES[(await request.json())["model"]](request)


APP = Starlette(routes=[Route("/api/chat", _chat, methods=["POST"]),
                        Route("/v1/chat/completions", _pings, methods=["POST"])])


@pytest.fixture(scope="module")
def url():
    with ServeInThread(APP) as base:
        yield base


def measure(engine, model: str, num_predict: int = 50, **kw) -> object:
    async def go():
        collector = RequestCollector("hi", {"num_predict": num_predict}, model)
        stream = lambda: engine.stream_chat(model, [{"role": "user", "content": "hi"}],
                                            options={"num_predict": num_predict})
        try:
            return await run_request(stream, collector, **kw)
        finally:
            await engine.aclose()
    return asyncio.run(go())


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_a_line_without_end_is_cut_at_the_line_limit(url):
    before = rss_mib()
    result = measure(OllamaEngine(url), "huge-line")
    assert result.failure.kind == FailureKind.LIMIT
    assert "sent a line longer than 16 MiB: llmtop stopped reading it" in result.failure.message
    assert result.content == "a"  # the chunk before it kept
    assert rss_mib() - before < 200  # 16 MiB held, not 100 (858 MB before the bound)


def test_a_gzip_bomb_is_cut_at_the_decompressed_limit(url):
    assert len(BOMB) < MiB  # on the wire
    before = rss_mib()
    result = measure(OllamaEngine(url), "bomb")
    assert result.failure.kind == FailureKind.LIMIT  # its spaces hit the line bound first
    assert rss_mib() - before < 200  # 748 MB before the bound


def test_the_decompressed_size_is_bounded_however_the_lines_end():
    class Raw(httpx.AsyncByteStream):
        async def __aiter__(self):
            packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
            for _ in range(40):  # 120 MiB of short lines, ~0.1 MB sent
                yield packer.compress(b"{}\n" * MiB)
            yield packer.flush()

    async def read() -> int:
        seen = 0
        async for piece in bounds.BoundedStream(Raw(), 16 + zlib.MAX_WBITS):
            assert len(piece) <= bounds.INFLATE_PIECE_BYTES
            seen += len(piece)
        return seen

    with pytest.raises(bounds.ReplyTooLarge, match="a compressed reply that inflates past 64 MiB"):
        asyncio.run(read())


def test_a_gzip_reply_within_bounds_is_read_and_another_encoding_refused(url):
    ok = measure(OllamaEngine(url), "gzip-ok")
    assert ok.status == Status.OK and ok.content == "a"
    refused = measure(OllamaEngine(url), "brotli")
    assert refused.failure.kind == FailureKind.LIMIT
    assert "a reply in the 'br' encoding, which llmtop did not ask for" in refused.failure.message


def test_a_stream_without_done_stops_past_num_predict(url):
    result = measure(OllamaEngine(url), "no-done", num_predict=50)
    assert chunk_limit({"num_predict": 50}) == 116  # 2 × 50 + 16
    assert result.metrics.text_chunks == 117  # the first past the limit stops the reading
    assert result.failure.kind == FailureKind.PROTOCOL
    assert result.failure.message == ("the server sent 117 chunks without ending the stream, "
                                      "though num_predict asked for 50 tokens: stopped reading")
    assert chunk_limit({"num_predict": -1}) is None


def test_keep_alive_pings_do_not_reset_the_token_timeout(url):
    result = measure(OpenAIEngine(url), "pings", token_timeout_s=0.5)
    assert result.content == "a"
    assert result.status == Status.ERROR and result.failure.kind == FailureKind.STALLED
    assert result.failure.message == ("no token for 0.5 s after 1 chunks (keep-alive pings do "
                                      "not count)")


def test_impossible_server_counts_are_flagged_not_used():
    events = [StreamEvent(1_000_000 * i, "ab") for i in range(1, 4)]
    done = StreamEvent(4_000_000, done=True, stats=ServerStats(
        eval_count=10**18, eval_duration=40_000_000, prompt_eval_count=11,
        prompt_eval_duration=1_000_000))
    m = compute_metrics(0, [*events, done])
    # 3 chunks of 2 characters: 10**18 > 8 × 6 + 64 = 112 tokens
    assert m.impossible == ("the server counts 1000000000000000000 tokens for 6 characters of "
                            "text: more than that text can hold; its counts and rates are not "
                            "used")
    assert m.server_decode_tps is None and m.buffered is None
    assert (m.output_tokens, m.tokens_basis) == (3, "chunks")
    # 112 tokens decoded in the 2 ms the text arrived over (a duration past the request's
    # 4 ms would be set aside too: sessions/measure/telemetry.py)
    plausible = compute_metrics(0, [*events, StreamEvent(4_000_000, done=True, stats=ServerStats(
        eval_count=112, eval_duration=2_000_000))])
    assert plausible.impossible is None and plausible.output_tokens == 112


def test_the_bounds_are_the_documented_ones():
    assert (bounds.MAX_LINE_BYTES, bounds.MAX_DECODED_BYTES) == (16 * MiB, 64 * MiB)
