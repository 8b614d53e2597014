"""`llmtop watch` on the wire (servers/watch/connection.py, wire.py): exact bytes both ways,
with raw sockets on the app's side and a raw engine that records what it got and answers
what each test scripts (a test double that makes the bytes exact; the real clients and
engines are in test_watch_proxy.py and the integration tests)."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable

import pytest

from llmtop.servers.child import free_port
from llmtop.servers.watch.proxy import WatchProxy
from llmtop.servers.watch.wire import Upstream, chunk, json_reply, request_head
from llmtop.testing.watch import WatchInThread


class Seen:
    """A Watcher that keeps every finished exchange."""

    def __init__(self) -> None:
        self.done: list = []
        self.ended = threading.Event()

    def started(self, ex) -> None:
        ex.id = 1

    def progressed(self, ex) -> None:
        pass

    def finished(self, ex) -> None:
        self.done.append(ex)
        self.ended.set()


def read_message(conn: socket.socket, buf: bytearray) -> bytes | None:
    """One HTTP request from `conn` (head, then a Content-Length or chunked body), raw; None
    at the end of the connection. `buf` keeps what was read past it."""
    while b"\r\n\r\n" not in buf:
        data = conn.recv(65536)
        if not data:
            return None
        buf += data
    end = buf.index(b"\r\n\r\n") + 4
    head = bytes(buf[:end]).lower()
    need = end
    if b"content-length:" in head:
        need += int(head.split(b"content-length:")[1].split(b"\r\n")[0])
    elif b"transfer-encoding: chunked" in head:
        while b"0\r\n\r\n" not in buf[end:]:
            buf += conn.recv(65536)
        need = buf.index(b"0\r\n\r\n", end) + 5
    while len(buf) < need:
        buf += conn.recv(65536)
    message = bytes(buf[:need])
    del buf[:need]
    return message


class RawEngine:
    """A raw TCP engine on a free loopback port: each connection in its own thread; every
    request read (raw bytes) is kept in `got` with its connection's number, and `answer`
    (the request → the bytes to send, or None to close) answers it."""

    def __init__(self, answer: Callable[[bytes], bytes | None],
                 tls: ssl.SSLContext | None = None) -> None:
        self.answer = answer
        self.tls = tls
        self.got: list[tuple[int, bytes]] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn, self.connections),
                             daemon=True).start()

    def _serve(self, conn: socket.socket, n: int) -> None:
        if self.tls is not None:
            conn = self.tls.wrap_socket(conn, server_side=True)
        buf = bytearray()
        with conn:
            while (message := read_message(conn, buf)) is not None:
                self.got.append((n, message))
                reply = self.answer(message)
                if reply is None:
                    return
                conn.sendall(reply)

    def close(self) -> None:
        self.sock.close()


OK_TEXT = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi"


def watched(engine: RawEngine, **kwargs) -> tuple[WatchInThread, Seen]:
    seen = Seen()
    proxy = WatchProxy(engine.url, ("127.0.0.1", free_port()), seen, **kwargs)
    return WatchInThread(proxy), seen


def exchange(url: str, *requests: bytes, expect: int) -> bytes:
    """Send `requests` on one connection, read until `expect` bytes came back (or the end)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        for r in requests:
            s.sendall(r)
        got = b""
        while len(got) < expect:
            data = s.recv(65536)
            if not data:
                break
            got += data
        return got


def test_the_request_head_keeps_the_clients_headers_but_host_the_token_and_proxy_ones():
    up = Upstream("http://127.0.0.1:11434/prefix/")
    headers = [(b"Host", b"127.0.0.1:11435"), (b"User-Agent", b"curl/8"),
               (b"X-Llmtop-Token", b"t"), (b"Proxy-Authorization", b"Basic x"),
               (b"Connection", b"keep-alive"), (b"Transfer-Encoding", b"chunked"),
               (b"Expect", b"100-continue"), (b"Accept", b"*/*")]
    streamed = request_head(b"POST", b"/api/blobs/x?y=1", "1.1", headers, up,
                            drop=frozenset({b"x-llmtop-token"}), chunked=True)
    # Host first (the engine's own), then the client's in order, less token, proxy-only and
    # framing headers; the target under the upstream's path prefix; the framing last, the
    # watch's own (its parser's reading, never the client's header passed on)
    assert streamed == (b"POST /prefix/api/blobs/x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:11434\r\n"
                        b"User-Agent: curl/8\r\nConnection: keep-alive\r\n"
                        b"Expect: 100-continue\r\nAccept: */*\r\n"
                        b"Transfer-Encoding: chunked\r\n\r\n")
    whole = request_head(b"POST", b"/api/chat", "1.0", headers, up,
                         drop=frozenset({b"x-llmtop-token"}), length=17, measured=True)
    # a body sent whole loses its framing and Expect, and says its length
    assert whole == (b"POST /prefix/api/chat HTTP/1.0\r\nHost: 127.0.0.1:11434\r\n"
                     b"User-Agent: curl/8\r\nConnection: keep-alive\r\nAccept: */*\r\n"
                     b"Content-Length: 17\r\n\r\n")
    assert chunk(b"abc") == b"3\r\nabc\r\n" and chunk(b"x" * 26) == b"1a\r\n" + b"x" * 26 + b"\r\n"
    assert chunk(b"") == b"0\r\n\r\n"
    reply = json_reply(403, {"error": "no"})
    assert reply == (b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 15\r\nConnection: close\r\n\r\n{\"error\": \"no\"}")


def test_two_requests_on_one_connection_reach_the_engine_on_one_connection_byte_exact():
    engine = RawEngine(lambda _m: OK_TEXT)
    w, _ = watched(engine)
    with w as url:
        port = url.rsplit(":", 1)[1]
        get = f"GET /api/tags HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-A: 1\r\n\r\n".encode()
        got = exchange(url, get, get, expect=2 * len(OK_TEXT))
    engine.close()
    assert got == OK_TEXT * 2  # the engine's bytes, twice, nothing added
    host = engine.url.removeprefix("http://").encode()
    sent = b"GET /api/tags HTTP/1.1\r\nHost: " + host + b"\r\nX-A: 1\r\n\r\n"
    assert engine.got == [(1, sent), (1, sent)]  # one engine connection for both


def test_a_chunked_upload_passes_as_chunks_and_a_measured_one_goes_whole():
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False}
    answer = json.dumps({"model": "m", "message": {"role": "assistant", "content": "ok"},
                         "done": True, "eval_count": 1}).encode()
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(answer), answer)
    engine = RawEngine(lambda _m: reply)
    w, seen = watched(engine)
    body = json.dumps(chat).encode()
    with w as url:
        port = url.rsplit(":", 1)[1]
        upload = (f"POST /api/blobs/sha256:00 HTTP/1.1\r\nHost: localhost:{port}\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n").encode()
        upload += b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
        measured = (f"POST /api/chat HTTP/1.1\r\nHost: localhost:{port}\r\n"
                    "Transfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n").encode()
        framed = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        assert exchange(url, upload, expect=len(reply)) == reply
        host_port = url.removeprefix("http://").split(":")
        with socket.create_connection((host_port[0], int(host_port[1])), timeout=5) as s:
            s.sendall(measured)
            # asked 100-continue, and its body is read whole before it goes: the watch says it
            assert s.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
            s.sendall(framed)
            got = b""
            while len(got) < len(reply):
                got += s.recv(65536)
        assert got == reply
        assert seen.ended.wait(5)
    engine.close()
    host = engine.url.removeprefix("http://").encode()
    (_, first), (_, second) = sorted(engine.got, key=lambda g: b"blobs" not in g[1])
    # the upload re-chunked piece by piece as it came (the same body: abc + de)
    assert first.startswith(b"POST /api/blobs/sha256:00 HTTP/1.1\r\nHost: " + host)
    assert first.endswith(b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    # the measured one whole, with its length, without chunks or Expect
    assert second == (b"POST /api/chat HTTP/1.1\r\nHost: " + host + b"\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    ex = seen.done[0]
    assert ex.facts.model == "m" and ex.answered and ex.status_code == 200
    assert ex.events[-1].content == "ok" and ex.events[-1].stats.eval_count == 1


def test_head_passes_and_the_next_request_reaches_the_engine_again():
    head_reply = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 17\r\n\r\n"
    engine = RawEngine(lambda m: head_reply if m.startswith(b"HEAD") else OK_TEXT)
    w, _ = watched(engine)
    with w as url:
        port = url.rsplit(":", 1)[1]
        h = f"HEAD / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        g = f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        got = exchange(url, h, expect=len(head_reply))
        assert got == head_reply  # no body waited for, whatever Content-Length says
        # HEAD then GET on one connection: the GET's answer follows the HEAD's
        assert exchange(url, h, g, expect=len(head_reply) + len(OK_TEXT)) == head_reply + OK_TEXT
    engine.close()
    assert [m.split(b" ")[0] for _, m in engine.got] == [b"HEAD", b"HEAD", b"GET"]


def test_an_engine_that_closes_a_kept_connection_gets_the_request_again_on_a_new_one():
    # the engine answers, then closes the kept connection as the next request arrives (an
    # idle timeout meeting it: a new-user pass saw a 502 at 4.998 s idle in front of
    # uvicorn's 5 s): no byte of an answer came, so the request is sent again, once, on a
    # new connection. On a fresh connection the same close is the engine's failure: 502
    answers = iter([OK_TEXT, None, OK_TEXT, None, None])
    engine = RawEngine(lambda _m: next(answers))
    w, _ = watched(engine)
    with w as url:
        port = url.rsplit(":", 1)[1]
        g = f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        host, p = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(p)), timeout=5) as s:
            s.sendall(g)
            assert s.recv(65536) == OK_TEXT
            s.sendall(g)
            assert s.recv(65536) == OK_TEXT  # answered on the engine's second connection
        got = exchange(url, g, expect=1 << 30)  # a fresh connection, closed unanswered
    engine.close()
    assert got.startswith(b"HTTP/1.1 502 ")  # not sent again: the connection was not a kept one
    assert [n for n, _ in engine.got] == [1, 1, 2, 3]


@pytest.mark.parametrize(("raw", "status"), [
    (b"NOT HTTP AT ALL\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 5000 + b"\r\n\r\n", 431),
], ids=["garbage", "head-too-big"])
def test_what_is_not_a_request_gets_the_watchs_own_answer(raw, status, monkeypatch):
    monkeypatch.setattr("llmtop.servers.watch.connection.MAX_HEAD_BYTES", 4096)
    engine = RawEngine(lambda _m: OK_TEXT)
    w, _ = watched(engine)
    with w as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as s:
            for i in range(0, len(raw), 1000):  # in pieces, as a slow client sends
                s.sendall(raw[i:i + 1000])
            got = b""
            while data := s.recv(65536):  # to the close
                got += data
    engine.close()
    assert got.startswith(b"HTTP/1.1 %d " % status) and b"Connection: close" in got
    assert engine.got == []


def test_an_https_engine_is_reached_over_tls(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    engine = RawEngine(lambda _m: OK_TEXT, tls=server)
    seen = Seen()
    proxy = WatchProxy(engine.url, ("127.0.0.1", free_port()), seen)
    assert proxy.tls is not None  # an https upstream gets the system's trust store ...
    proxy.tls = ssl.create_default_context(cafile=str(cert))  # ... here, the test's own CA
    with WatchInThread(proxy) as url:
        port = url.rsplit(":", 1)[1]
        got = exchange(url, f"GET /api/tags HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
                       .encode(), expect=len(OK_TEXT))
    engine.close()
    assert got == OK_TEXT
    host = engine.url.removeprefix("https://").encode()
    assert engine.got == [(1, b"GET /api/tags HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")]


def test_a_refused_request_behind_one_in_flight_is_answered_after_it_and_never_sent():
    engine = RawEngine(lambda _m: OK_TEXT)
    w, _ = watched(engine)
    with w as url:
        port = url.rsplit(":", 1)[1]
        good = f"GET /api/tags HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        evil = b"GET /api/tags HTTP/1.1\r\nHost: evil.example\r\n\r\n"
        # pipelined: the good one, the refused one, another good one after it
        got = exchange(url, good + evil + good, expect=1 << 30)  # to the close
    engine.close()
    assert got.startswith(OK_TEXT)  # the first answer first, whole
    refusal = got[len(OK_TEXT):]
    assert refusal.startswith(b"HTTP/1.1 403 Forbidden\r\n") and b"evil.example" in refusal
    assert len(engine.got) == 1  # neither the refused request nor the one after it was sent


TOKEN = "s3cret-token-0123456789abcdef"


def test_an_upgrade_never_opens_a_way_past_the_checks():
    # a new-user pass: a refused request carrying Upgrade made the rest of the connection a
    # raw tunnel, so a request with no token reached the engine. The watch passes no Upgrade
    # at all now, and a refusal ends the connection
    engine = RawEngine(lambda _m: OK_TEXT)
    w, _ = watched(engine, token=TOKEN)
    with w as url:
        smuggled = (b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\n"
                    b"Upgrade: websocket\r\n\r\nPOST /api/delete HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    b"Content-Length: 13\r\n\r\n{\"model\":\"x\"}")
        got = exchange(url, smuggled, expect=1 << 30)
    engine.close()
    assert got.startswith(b"HTTP/1.1 401 Unauthorized\r\n")
    assert engine.got == []  # nothing reached the engine


def test_an_h2c_upgrade_goes_on_in_http1_with_its_body():
    # curl --http2 on http:// asks Upgrade: h2c; llhttp stops at the head and leaves the body.
    # The engine gets the request without the upgrade headers, its 13-byte body, and the next
    # request on the connection is parsed, checked and answered as any other
    body = b'{"model":"x"}'
    engine = RawEngine(lambda _m: OK_TEXT)
    w, _ = watched(engine)
    with w as url:
        port = url.rsplit(":", 1)[1]
        h2c = (f"POST /api/blobs/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
               "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABk\r\n"
               "Content-Length: 13\r\n\r\n").encode() + body
        then = f"GET /api/tags HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        got = exchange(url, h2c + then, expect=2 * len(OK_TEXT))
    engine.close()
    assert got == OK_TEXT * 2
    host = engine.url.removeprefix("http://").encode()
    assert engine.got == [
        (1, b"POST /api/blobs/x HTTP/1.1\r\nHost: " + host + b"\r\nContent-Length: 13\r\n\r\n"
         + body),
        (1, b"GET /api/tags HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")]


def test_the_token_stops_here_and_the_apps_own_authorization_goes_on():
    engine = RawEngine(lambda _m: OK_TEXT)
    w, _ = watched(engine, token=TOKEN)
    with w as url:
        port = url.rsplit(":", 1)[1]
        host = f"Host: 127.0.0.1:{port}\r\n"
        # the token in X-Llmtop-Token, the app's own key for the engine in Authorization
        own = (f"GET /v1/models HTTP/1.1\r\n{host}X-Llmtop-Token: {TOKEN}\r\n"
               "Authorization: Bearer engine-key\r\n\r\n").encode()
        # the token as a bearer, its scheme in lower case (RFC 9110, 11.1: case-insensitive)
        bearer = f"GET /v1/models HTTP/1.1\r\n{host}Authorization: bearer {TOKEN}\r\n\r\n".encode()
        # two Host headers: which one would be checked?
        twice = f"GET /v1/models HTTP/1.1\r\n{host}Host: evil.example\r\n\r\n".encode()
        assert exchange(url, own, expect=len(OK_TEXT)) == OK_TEXT
        assert exchange(url, bearer, expect=len(OK_TEXT)) == OK_TEXT
        assert exchange(url, twice, expect=1 << 30).startswith(b"HTTP/1.1 400 Bad Request\r\n")
    engine.close()
    up = engine.url.removeprefix("http://").encode()
    assert [m for _, m in engine.got] == [
        b"GET /v1/models HTTP/1.1\r\nHost: " + up + b"\r\nAuthorization: Bearer engine-key\r\n\r\n",
        b"GET /v1/models HTTP/1.1\r\nHost: " + up + b"\r\n\r\n"]


def test_a_head_to_an_engine_that_is_not_there_gets_a_502_without_a_body():
    seen = Seen()
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with WatchInThread(WatchProxy(dead, ("127.0.0.1", free_port()), seen)) as url:
        port = url.rsplit(":", 1)[1]
        got = exchange(url, f"HEAD / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode(),
                       expect=1 << 30)
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 502 Bad Gateway") and b"Content-Length: " in head
    assert body == b""  # RFC 9110, 9.3.2: no body in an answer to HEAD
