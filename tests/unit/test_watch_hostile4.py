"""`llmtop watch` against hostile clients and engines: request smuggling through two framings,
half-sent heads that would starve a client holding the token, absolute-form and CONNECT, and
the bounds of what the watch keeps for a request (an endless answer, an endless line, a day of
requests). Raw sockets on the app's side and a raw engine that records every request it read
(test_watch_wire.RawEngine): what the engine got is the fact each test checks."""

from __future__ import annotations

import gzip
import json
import socket
import time

import pytest

from llmtop.engines.events import FailureKind
from llmtop.engines.http import Peer
from llmtop.servers.child import free_port
from llmtop.servers.watch import meter as meter_module
from llmtop.servers.watch.meter import Meter
from llmtop.servers.watch.proxy import WatchProxy
from llmtop.testing.watch import WatchInThread
from tests.unit.test_watch_wire import OK_TEXT, RawEngine, Seen, exchange, watched

PEER = Peer("http://127.0.0.1:1", "the watched engine", "start it", 1.0)


def hidden_generate(port: str) -> bytes:
    """A whole `POST /api/generate` to hide inside another request's body."""
    body = b'{"model":"m","prompt":"hidden","stream":false}'
    return (f"POST /api/generate HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def test_two_transfer_encodings_are_refused_and_the_engine_reads_nothing():
    # llhttp reads `gzip` then `chunked` as one list ending in chunked; a parser that takes the
    # first line sees no chunking and reads the chunk's bytes, `0\r\n\r\n` and all, as a body,
    # so what follows the last chunk is a second request nobody checked or measured
    engine = RawEngine(lambda _m: OK_TEXT)
    w, seen = watched(engine)
    with w as url:
        port = url.rsplit(":", 1)[1]
        inner = b"0\r\n\r\n" + hidden_generate(port)
        smuggle = (f"POST /api/show HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                   "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
        smuggle += b"%x\r\n%s\r\n0\r\n\r\n" % (len(inner), inner)
        got = exchange(url, smuggle, expect=1 << 20)
    engine.close()
    assert got.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert b"more than one Transfer-Encoding header" in got
    assert engine.got == []  # not one byte reached the engine
    assert seen.done == []


@pytest.mark.parametrize("coding", [b"gzip", b"gzip, chunked", b"identity"])
def test_a_transfer_coding_other_than_chunked_alone_is_refused(coding):
    engine = RawEngine(lambda _m: OK_TEXT)
    w, _ = watched(engine)
    with w as url:
        port = url.rsplit(":", 1)[1]
        request = (f"POST /api/show HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                   f"Transfer-Encoding: {coding.decode()}\r\n\r\n").encode()
        got = exchange(url, request + b"3\r\nabc\r\n0\r\n\r\n", expect=1 << 20)
    engine.close()
    # llhttp refuses some of these itself (a 400 of its own wording); either way a 400, and
    # the engine gets nothing
    assert got.startswith(b"HTTP/1.1 400 Bad Request\r\n"), got[:200]
    assert engine.got == []


def test_the_engine_gets_the_framing_the_watch_parsed_not_the_clients_header():
    engine = RawEngine(lambda _m: OK_TEXT)
    w, _ = watched(engine)
    with w as url:
        port = url.rsplit(":", 1)[1]
        # `Transfer-Encoding:  CHUNKED ` (spaces, upper case) is one chunked coding
        request = (f"POST /api/show HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-A: 1\r\n"
                   "Transfer-Encoding:  CHUNKED \r\n\r\n3\r\nabc\r\n0\r\n\r\n").encode()
        sized = (f"POST /api/show HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                 "Content-Length: 3\r\n\r\nxyz").encode()
        got = exchange(url, request, sized, expect=2 * len(OK_TEXT))
    engine.close()
    assert got == OK_TEXT * 2
    host = engine.url.removeprefix("http://").encode()
    # the watch's own framing header, last; the client's spelling of it dropped
    assert engine.got == [
        (1, b"POST /api/show HTTP/1.1\r\nHost: " + host + b"\r\nX-A: 1\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"),
        (1, b"POST /api/show HTTP/1.1\r\nHost: " + host + b"\r\nContent-Length: 3\r\n\r\nxyz"),
    ]


def test_absolute_form_is_checked_as_its_host_and_measured():
    answer = json.dumps({"model": "m", "response": "ok", "done": True,
                         "eval_count": 1}).encode()
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(answer), answer)
    engine = RawEngine(lambda _m: reply)
    w, seen = watched(engine)
    body = b'{"model":"m","prompt":"hi","stream":false}'
    with w as url:
        port = url.rsplit(":", 1)[1]
        foreign = (f"POST http://evil.example/api/generate HTTP/1.1\r\nHost: 127.0.0.1:{port}"
                   f"\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
        refused = exchange(url, foreign, expect=1 << 20)
        local = (f"POST http://127.0.0.1:{port}/api/generate HTTP/1.1\r\nHost: 127.0.0.1:{port}"
                 f"\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
        passed = exchange(url, local, expect=len(reply))
        assert seen.ended.wait(5)
    engine.close()
    assert refused.startswith(b"HTTP/1.1 403 Forbidden") and b"evil.example" in refused
    assert passed == reply
    (ex,) = seen.done  # measured, as any other generation request
    assert ex.path == "/api/generate" and ex.status_code == 200
    (_, sent), = engine.got  # the engine got origin-form, once
    assert sent.startswith(b"POST /api/generate HTTP/1.1\r\n")


@pytest.mark.parametrize("raw, status", [
    (b"CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n", b"405"),
    (b"GET /api/tags HTTP/1.1\r\nX-A: 1\r\n\r\n", b"400"),  # HTTP/1.1 without Host
])
def test_connect_and_a_hostless_request_are_answered_by_the_watch(raw, status):
    engine = RawEngine(lambda _m: OK_TEXT)
    w, _ = watched(engine)
    with w as url:
        got = exchange(url, raw, expect=1 << 20)
    engine.close()
    assert got.startswith(b"HTTP/1.1 " + status), got[:100]
    assert engine.got == []


def test_half_sent_heads_do_not_starve_a_client_with_the_token(monkeypatch):
    # with a token, no engine connection is opened for a connection before it showed the
    # token; past the bound on such connections the oldest is closed, so the newest client
    # still gets through however many half-sent heads came before it
    monkeypatch.setattr("llmtop.servers.watch.proxy.unchecked_bound", lambda: 20)
    engine = RawEngine(lambda _m: OK_TEXT)
    seen = Seen()
    proxy = WatchProxy(engine.url, ("127.0.0.1", free_port()), seen, token="sesame")
    sockets = []
    with WatchInThread(proxy) as url:
        host, port = url.removeprefix("http://").split(":")
        for _ in range(60):  # three times the bound
            s = socket.create_connection((host, int(port)), timeout=5)
            s.sendall(b"GET / HTTP/1.1\r\nX: ")
            sockets.append(s)
        good = (f"GET /api/tags HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                "Authorization: Bearer sesame\r\n\r\n").encode()
        got = exchange(url, good, expect=len(OK_TEXT))
        # the first 40 half-open connections were closed: reading them gives their end
        closed = 0
        for s in sockets[:40]:
            try:
                closed += s.recv(100) == b""
            except OSError:
                closed += 1
        for s in sockets:
            s.close()
    engine.close()
    assert got == OK_TEXT
    assert closed == 40
    assert engine.connections == 1  # only the client with the token reached the engine


def test_a_head_not_whole_in_time_gets_408(monkeypatch):
    monkeypatch.setattr("llmtop.servers.watch.connection.HEAD_TIMEOUT_S", 0.3)
    engine = RawEngine(lambda _m: OK_TEXT)
    w, _ = watched(engine)
    with w as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(b"GET /api/tags HTTP/1.1\r\nX-Slow: ")
            got = b""
            while data := s.recv(65536):  # the watch answers, then closes
                got += data
    engine.close()
    assert got.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert engine.got == []


# ---------------------------------------------------------------- the meter's bounds

def ollama_meter(**kwargs) -> Meter:
    return Meter("ollama", "generate", streamed=True, status=200, peer=PEER, **kwargs)


def test_an_endless_answer_is_measured_up_to_the_bound_and_said(monkeypatch):
    monkeypatch.setattr(meter_module, "MAX_EVENTS", 100)
    m = ollama_meter()
    line = b'{"response":"a","done":false}\n'
    for i in range(250):
        m.feed(line, i)
    assert m.done
    # 100 text chunks kept, then the measurement ends at the 101st (t=100), said as a limit
    assert len(m.events) == 101 and all(e.content == "a" for e in m.events[:100])
    last = m.events[-1]
    assert last.done and last.t_ns == 100 and last.failure.kind is FailureKind.LIMIT
    assert "measured up to there" in last.failure.message


def test_a_long_line_costs_its_length_once_and_ends_at_the_line_bound(monkeypatch):
    monkeypatch.setattr(meter_module, "MAX_LINE_BYTES", 1 << 20)
    m = Meter("ollama", "generate", streamed=True, status=200, peer=PEER)
    block = b"x" * 65536
    t0 = time.perf_counter_ns()
    for i in range(16):  # exactly 1 MiB, no newline: still within the bound
        m.feed(block, i)
    assert not m.done and len(m._buf) == 1 << 20
    m.feed(b"y", 16)  # one byte past it
    assert m.done and m.events[-1].failure.kind is FailureKind.LIMIT
    assert "a line longer than 1 MiB" in m.events[-1].failure.message
    assert time.perf_counter_ns() - t0 < 5e9  # a sanity bound, not a speed target


def test_a_gzip_answer_is_measured_from_its_decoded_lines():
    lines = [json.dumps({"response": w, "done": False}).encode() + b"\n" for w in "abc"]
    lines.append(json.dumps({"response": "", "done": True, "eval_count": 3}).encode() + b"\n")
    packed = gzip.compress(b"".join(lines))
    m = ollama_meter(encoding="gzip")
    half = len(packed) // 2
    m.feed(packed[:half], 10)
    m.feed(packed[half:], 20)
    m.end(30)
    assert [e.content for e in m.events] == ["a", "b", "c", ""]
    assert m.events[-1].done and m.events[-1].failure is None
    assert m.events[-1].stats.eval_count == 3
    br = ollama_meter(encoding="br")
    br.feed(b"\x0b\x02\x80", 5)
    (event,) = br.events
    assert event.done and event.t_ns == 5 and event.failure.kind is FailureKind.PROTOCOL
    assert "'br'" in event.failure.message


def test_a_tool_call_is_the_answers_first_token_through_the_watch():
    # Ollama: the call whole in a done:false chunk with empty content (ollama #11633's shape)
    call = {"function": {"name": "get_weather", "arguments": {"city": "Tokyo"}}}
    m = Meter("ollama", "chat", streamed=True, status=200, peer=PEER)
    m.feed(json.dumps({"message": {"role": "assistant", "content": "",
                                   "tool_calls": [call]}, "done": False}).encode() + b"\n", 40)
    m.feed(json.dumps({"message": {"role": "assistant", "content": ""}, "done": True,
                       "eval_count": 9}).encode() + b"\n", 50)
    first, done = m.events
    assert first.has_text and first.t_ns == 40
    assert first.tool_calls == 'get_weather{"city": "Tokyo"}'
    assert done.done and done.failure is None
    # OpenAI: the arguments' fragments spread over deltas beside "content": ""
    o = Meter("openai", "chat", streamed=True, status=200, peer=PEER)
    deltas = [{"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                               "function": {"name": "get_weather", "arguments": ""}}]},
              {"content": "", "tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]},
              {"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Tokyo"}'}}]}]
    for t, delta in enumerate(deltas, start=1):
        chunk = {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        o.feed(b"data: " + json.dumps(chunk).encode() + b"\n\n", 10 * t)
    end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    o.feed(b"data: " + json.dumps(end).encode() + b"\n\ndata: [DONE]\n\n", 40)
    texts = [e for e in o.events if e.has_text]
    assert [e.t_ns for e in texts] == [10, 20, 30]  # the first piece, the name, is TTFT's
    assert "".join(e.tool_calls for e in texts) == 'get_weather{"city": "Tokyo"}'
    assert o.events[-1].done and o.events[-1].failure is None
