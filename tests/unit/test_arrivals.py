"""stamping/arrivals.py: connections that stamp each block of bytes as it arrives.

The stamps are checked by order on one clock (perf_counter_ns before and after a block is
handed to the protocol; a server thread's stamp before it sends), never by durations. The
HTTP behaviour is checked against a small threaded socket server written here, whose
connections and closes the tests control.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from time import perf_counter_ns

import httpx
import pytest

from llmtop.stamping import rxstamps
from llmtop.stamping.arrivals import (
    ArrivalBackend,
    ArrivalStream,
    BlockBuffer,
    measured_transport,
    stamp_arrivals,
)
from llmtop.stamping.stamps import arrival_ns, stamping

Handler = Callable[[socket.socket, "Server"], None]


class Server:
    """A TCP server in a thread; `handle(conn, server)` serves each connection in turn.
    `sent_ns`: the handler's perf_counter_ns stamps, taken just before its sends."""

    def __init__(self, handle: Handler, wrap: ssl.SSLContext | None = None) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.handle, self.wrap = handle, wrap
        self.connections = 0
        self.sent_ns: list[int] = []
        self.closed = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            if self.wrap is not None:
                conn = self.wrap.wrap_socket(conn, server_side=True)
            with conn:
                self.handle(conn, self)

    def close(self) -> None:
        self.sock.close()


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(65536)
        if not more:
            return b""
        data += more
    return data


def _reply(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(handle: Handler, wrap: ssl.SSLContext | None = None) -> Server:
        servers.append(Server(handle, wrap))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def _keep_alive(conn: socket.socket, server: Server) -> None:
    while _read_request(conn):
        server.sent_ns.append(perf_counter_ns())
        conn.sendall(_reply(b"hello"))


def _client(port: int, scheme: str = "http", **kw: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=f"{scheme}://127.0.0.1:{port}", **kw)  # type: ignore[arg-type]


def test_the_transport_carries_the_backend():
    # the guard for httpx/httpcore moving the private names measured_transport sets
    assert isinstance(measured_transport()._pool._network_backend, ArrivalBackend)
    proxied = measured_transport("http://127.0.0.1:9")
    assert isinstance(proxied._pool._network_backend, ArrivalBackend)
    sized = measured_transport(limits=httpx.Limits(max_connections=3))  # a load generator's
    assert sized._pool._max_connections == 3


async def test_a_read_notes_the_arrival_of_its_block_and_splits_keep_it():
    loop = asyncio.get_running_loop()
    protocol = BlockBuffer()
    reader, writer = socket.socketpair()
    with reader, writer:
        transport, _ = await loop.connect_accepted_socket(lambda: protocol, reader)
        stream = ArrivalStream(transport, protocol)  # type: ignore[arg-type]
        before = perf_counter_ns()
        protocol.data_received(b"abcdef")
        after = perf_counter_ns()
        with stamping() as stamp:
            assert await stream.read(4) == b"abcd"
            first = stamp.received_ns
            assert first is not None and before <= first <= after
            assert await stream.read(4) == b"ef"  # the rest of the same block: same arrival
            assert stamp.received_ns == first == arrival_ns()
        await stream.aclose()


def test_without_arrivals_the_chunk_stamp_is_now():
    with stamping():
        before = perf_counter_ns()
        assert before <= arrival_ns() <= perf_counter_ns()


async def test_stamps_fall_between_the_servers_send_and_the_clients_read(serve):
    server = serve(_keep_alive)
    async with _client(server.port, transport=measured_transport()) as client:
        for _ in range(2):
            with stamping() as stamp:
                resp = await client.get("/")
                read_ns = perf_counter_ns()
            assert resp.text == "hello"
            assert stamp.received_ns is not None
            assert server.sent_ns[-1] < stamp.received_ns < read_ns
    assert server.connections == 1  # kept alive and reused


async def test_a_connection_the_server_closed_is_not_reused(serve):
    def once_then_close(conn: socket.socket, server: Server) -> None:
        if _read_request(conn):
            conn.sendall(_reply(b"ok"))
        conn.close()
        server.closed.set()

    server = serve(once_then_close)
    async with _client(server.port, transport=measured_transport()) as client:
        assert (await client.get("/")).text == "ok"
        assert await asyncio.to_thread(server.closed.wait, 5)
        server.closed.clear()
        assert (await client.get("/")).text == "ok"
    assert server.connections == 2


async def test_refused_and_silent_servers_raise_httpx_errors(serve):
    with socket.socket() as probe:  # a port nobody listens on: bound, never listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        async with _client(port, transport=measured_transport()) as client:
            with pytest.raises(httpx.ConnectError):
                await client.get("/")
    silent = serve(lambda conn, server: _read_request(conn) and conn.recv(1))
    async with _client(silent.port, transport=measured_transport(), timeout=0.05) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.get("/")


async def test_a_reset_mid_response_is_a_read_error(serve):
    def reset(conn: socket.socket, server: Server) -> None:
        _read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")

    server = serve(reset)
    async with _client(server.port, transport=measured_transport()) as client:
        with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
            await client.get("/")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


async def test_tls_connections_stamp_too(serve, certificate):
    cert, key = certificate
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    server = serve(_keep_alive, wrap=server_ctx)
    client_ctx = ssl.create_default_context(cafile=str(cert))
    transport = stamp_arrivals(httpx.AsyncHTTPTransport(verify=client_ctx))
    async with _client(server.port, "https", transport=transport) as client:
        with stamping() as stamp:
            resp = await client.get("/")
        assert resp.text == "hello" and resp.extensions["network_stream"] is not None
        assert stamp.received_ns is not None and stamp.received_ns > server.sent_ns[-1]


@pytest.mark.skipif(sys.platform != "linux", reason="kernel-stamped streams are Linux's")
async def test_a_reader_thread_hands_the_socket_to_tls_whole(certificate):
    # an HTTPS request through a proxy: plain bytes first (CONNECT and its answer), then TLS on
    # the same socket. With reader threads (the TUI's way) the thread has read the answer;
    # start_tls must stop it before the handshake, or it would take the server's TLS bytes
    cert, key = certificate
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))

    def tunnel() -> None:
        conn, _ = listener.accept()
        assert conn.recv(100) == b"CONNECT\n"
        conn.sendall(b"OK\n")
        with server_ctx.wrap_socket(conn, server_side=True) as tls:
            assert tls.recv(100) == b"ping"
            tls.sendall(b"pong")
            tls.recv(1)

    thread = threading.Thread(target=tunnel, daemon=True)
    thread.start()
    rxstamps.use_reader_threads(True)
    try:
        stream = await ArrivalBackend().connect_tcp("127.0.0.1", listener.getsockname()[1],
                                                    timeout=5)
        assert isinstance(stream, rxstamps.KernelStampedStream) and stream.threaded
        await stream.write(b"CONNECT\n")
        assert await asyncio.wait_for(stream.read(100), 10) == b"OK\n"
        assert stream._thread is not None  # the reader thread read it
        client_ctx = ssl.create_default_context(cafile=str(cert))
        tls = await stream.start_tls(client_ctx, "127.0.0.1", timeout=10)
        await tls.write(b"ping")
        assert await asyncio.wait_for(tls.read(100), 10) == b"pong"
        await tls.aclose()
    finally:
        rxstamps.use_reader_threads(False)
        listener.close()
    thread.join(10)
