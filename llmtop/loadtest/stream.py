"""One measured /api/chat request over a blocking httpx client, for Locust's gevent users.

The same stamping and classification as `llmtop.sessions.measure.request.run_request`: each NDJSON
line is stamped, once complete and before it is parsed, with the arrival of the bytes that
completed it (`stamps.arrival_ns`, as `OllamaEngine` stamps its lines), becomes a
`StreamEvent`, goes into a `RequestCollector`, and `finish()` decides the status and derives
the metrics. Failures become the engines' `Failure`s (llmtop.engines.http), never exceptions.

Arrivals: the client's connections come from `arrival_transport()`, whose reads note when
their bytes arrived (`stamps.note_arrival`) — the blocking counterpart of
`llmtop.engines.arrivals` (asyncio only): on a plain TCP socket on Linux the stamp is the
kernel's receive stamp (`llmtop.engines.rxstamps`, read with `recvmsg`), which a busy load
generator's own scheduling cannot delay; elsewhere a blocking read has the bytes when `recv`
returns them, so that is the stamp. httpx has no public way to give a transport a network backend
(encode/httpx#3749), so it is set on the transport's pool as `arrivals.stamp_arrivals` does;
a transport whose pool lacks those names keeps plain stamps (the time of the line's parse).
"""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterable, Iterator
from time import perf_counter_ns
from typing import Any

import httpcore
import httpx

from llmtop.engines import rxstamps
from llmtop.engines.events import ServerStats, StreamEvent
from llmtop.engines.http import (
    Peer,
    failure_for_http,
    failure_for_transport,
    failure_in_stream,
    failure_protocol,
    failure_truncated,
)
from llmtop.engines.stamps import arrival_ns, note_arrival, note_written, stamping
from llmtop.sessions.measure.request import RequestCollector, RequestResult, chat_messages


class _ArrivalStream(httpcore.NetworkStream):
    """A blocking connection whose reads note the arrival of their bytes in the open
    SendStamp: the kernel's receive stamp on a plain TCP socket where it gives one
    (`rxstamps.enable`, Linux; read with `recvmsg`), else perf_counter_ns when `recv`
    returned them."""

    def __init__(self, inner: httpcore.NetworkStream, kernel: bool = False) -> None:
        self._inner = inner
        self._sock: socket.socket | None = inner.get_extra_info("socket") if kernel else None
        if self._sock is not None and not rxstamps.enable(self._sock):
            self._sock = None

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        """At most `max_bytes` bytes (b"" at the end), waiting up to `timeout` s; noted.
        Raises httpcore.ReadTimeout / ReadError as httpcore's own read does."""
        if self._sock is None:
            data = self._inner.read(max_bytes, timeout)
            note_arrival(perf_counter_ns())
            return data
        try:
            self._sock.settimeout(timeout)
            data, anc, _, _ = self._sock.recvmsg(max_bytes, rxstamps.ANC_SIZE)
        except TimeoutError as exc:
            raise httpcore.ReadTimeout(str(exc) or "read timed out") from exc
        except OSError as exc:
            raise httpcore.ReadError(str(exc) or type(exc).__name__) from exc
        note_arrival(rxstamps.stamp_of(anc))
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        """Send `buffer` (httpcore's own write), noting the moment before it as the request's
        send stamp (`stamps.note_written`; why before: rxstamps.KernelStampedStream.write)."""
        t_ns = perf_counter_ns()
        self._inner.write(buffer, timeout)
        note_written(t_ns)

    def close(self) -> None:
        """Close the connection."""
        self._inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        """TLS over this connection; its reads are noted too."""
        return _ArrivalStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        """httpcore's connection details (socket, addresses, is_readable, ...)."""
        return self._inner.get_extra_info(info)


class _ArrivalBackend(httpcore.NetworkBackend):
    """httpcore's blocking backend (its sockets, which Locust's gevent patches), with every
    connection an `_ArrivalStream`."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
                    ) -> httpcore.NetworkStream:
        """Connect to host:port (httpcore's errors)."""
        return _ArrivalStream(self._inner.connect_tcp(host, port, timeout, local_address,
                                                      socket_options), kernel=True)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
                            ) -> httpcore.NetworkStream:
        """Connect to the Unix socket `path` (httpcore's errors)."""
        return _ArrivalStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        """httpcore's retry back-off."""
        self._inner.sleep(seconds)


def arrival_transport() -> httpx.HTTPTransport:
    """A blocking httpx transport (no proxy from the environment) whose connections note when
    their bytes arrived; pass it as `transport=` to the httpx.Client given to `stream_chat`."""
    transport = httpx.HTTPTransport(trust_env=False)
    pool = getattr(transport, "_pool", None)
    if pool is not None and hasattr(pool, "_network_backend"):
        pool._network_backend = _ArrivalBackend()
    return transport


def _events(lines: Iterator[str], peer: Peer) -> Iterator[StreamEvent]:
    """StreamEvents from the reply's lines, each stamped with the arrival of the bytes that
    completed it (httpx reads only when it needs more, so the last block read is that one);
    the last event is done (server stats) or carries the failure."""
    for line in lines:
        t_ns = arrival_ns()
        if not line.strip():
            continue
        try:
            part: Any = json.loads(line)
            if "error" in part:
                yield StreamEvent(
                    t_ns, done=True, failure=failure_in_stream(str(part["error"]), peer=peer)
                )
                return
            message = part.get("message") or {}
            content, thinking = message.get("content") or "", message.get("thinking") or ""
        except (ValueError, TypeError, AttributeError) as exc:
            detail = f"a reply that is not Ollama's protocol: {type(exc).__name__}: {exc}"
            yield StreamEvent(t_ns, done=True, failure=failure_protocol(detail, peer=peer))
            return
        if part.get("done"):
            yield StreamEvent(
                t_ns, content, thinking, done=True, stats=ServerStats.from_mapping(part)
            )
            return
        yield StreamEvent(t_ns, content, thinking)
    yield StreamEvent(perf_counter_ns(), done=True, failure=failure_truncated(peer))


def stream_chat(
    client: httpx.Client, peer: Peer, collector: RequestCollector, think: bool | None = None
) -> RequestResult:
    """POST /api/chat for the collector's prompt, model and options, streamed into it.

    client: an httpx.Client whose base_url is the engine, its transport `arrival_transport()`
    (another one stamps lines when they are parsed). The send stamp is taken just before the
    request is sent. Never raises for the server's or the network's misbehaviour: the
    result's status and failure say what happened.
    """
    body: dict[str, Any] = {
        "model": collector.model,
        "messages": chat_messages(collector.prompt),
        "options": collector.options,
        "stream": True,
    }
    if think is not None:
        body["think"] = think
    with stamping() as stamp:
        collector.sent_ns = stamp.prepare_ns
        _send(client, peer, collector, body)
    return collector.finish()


def _send(client: httpx.Client, peer: Peer, collector: RequestCollector,
          body: dict[str, Any]) -> None:
    """POST `body` and add its events (or its failure) to the collector."""
    try:
        with client.stream("POST", "/api/chat", json=body) as response:
            if response.status_code != 200:
                failure = failure_for_http(
                    response.status_code, response.read(), peer=peer, model=collector.model
                )
                collector.add(StreamEvent(perf_counter_ns(), done=True, failure=failure))
                return
            for event in _events(response.iter_lines(), peer):
                collector.add(event)
    except httpx.HTTPError as exc:
        collector.add(
            StreamEvent(perf_counter_ns(), done=True, failure=failure_for_transport(exc, peer=peer))
        )
