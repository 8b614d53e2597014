"""A server that drops a stream is not examined, but the failure says how far it had come
(engines/http.StreamProgress): the chunks received and for how long they had streamed."""

from __future__ import annotations

import asyncio
import re

from llmtop.engines.events import FailureKind
from llmtop.engines.ollama import OllamaEngine
from llmtop.testing.scripted import ScriptedUpstream

CHUNK = b'{"model":"m","created_at":"2026-01-01T00:00:00Z","message":{"role":"assistant","content":"x"},"done":false}\n'  # noqa: E501


async def _final(engine: OllamaEngine, model: str):
    async for event in engine.stream_chat(model, [{"role": "user", "content": "hi"}]):
        if event.done:
            return event.failure
    raise AssertionError("no final event")


def test_a_stream_that_ends_without_its_done_chunk_says_how_far_it_came():
    with ScriptedUpstream() as up:
        async def go():
            engine = OllamaEngine(up.url)
            try:
                return await _final(engine, "truncated")  # two chunks, then a clean end
            finally:
                await engine.aclose()

        failure = asyncio.run(go())
    assert failure.kind == FailureKind.TRUNCATED
    assert re.search(r"ended without a done chunk after \d+\.\d\d s of streaming \(2 chunks\)",
                     failure.message), failure.message


def test_a_connection_cut_mid_stream_says_how_long_it_had_streamed():
    async def go():
        async def serve(reader, writer):
            await reader.readuntil(b"\r\n\r\n")
            await reader.read(65536)  # the body (small: read once)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
            for _ in range(3):
                writer.write(b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK))
                await writer.drain()
            writer.transport.abort()  # gone: no last chunk, no done line

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        engine = OllamaEngine(f"http://127.0.0.1:{port}")
        try:
            return await _final(engine, "m")
        finally:
            await engine.aclose()
            server.close()

    failure = asyncio.run(go())
    assert failure.kind == FailureKind.TRUNCATED
    assert re.search(r"broke mid-stream after \d+\.\d\d s of streaming \(3 chunks\)",
                     failure.message), failure.message
    assert failure.remedy == "the server may have crashed; check its log and retry"
