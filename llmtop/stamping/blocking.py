"""Arrival stamps for a blocking httpx client: the counterpart of `arrivals` (asyncio only),
for Locust's gevent users (llmtop/loadtest/stream.py).

The client's connections come from `arrival_transport()`, whose reads note when their bytes
arrived (`stamps.note_arrival`) and whose writes note the send stamp (`stamps.note_written`).
On a plain TCP socket on Linux the arrival is the kernel's receive stamp (`rxstamps`, read
with `recvmsg`), which a busy load generator's own scheduling cannot delay; elsewhere a
blocking read has the bytes when `recv` returns them, so that is the stamp. httpx has no
public way to give a transport a network backend (encode/httpx#3749), so it is set on the
transport's pool as `arrivals.stamp_arrivals` does; a transport whose pool lacks those names
keeps plain stamps (the time of the line's parse).
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterable
from time import perf_counter_ns
from typing import Any

import httpcore
import httpx

from llmtop.stamping import rxstamps
from llmtop.stamping.bounds import BlockingBoundedTransport
from llmtop.stamping.stamps import HeadJoin, note_arrival, note_written


class BlockingArrivalStream(httpcore.NetworkStream):
    """A blocking connection whose reads note the arrival of their bytes in the open
    SendStamp: the kernel's receive stamp on a plain TCP socket where it gives one
    (`rxstamps.enable`, Linux; read with `recvmsg`), else perf_counter_ns when `recv`
    returned them."""

    def __init__(self, inner: httpcore.NetworkStream, kernel: bool = False) -> None:
        self._inner = inner
        self._join = HeadJoin()
        self._sock: socket.socket | None = inner.get_extra_info("socket") if kernel else None
        if self._sock is not None and not rxstamps.enable(self._sock):
            self._sock = None

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        """At most `max_bytes` bytes (b"" at the end), waiting up to `timeout` s; noted.
        Raises httpcore.ReadTimeout / ReadError as httpcore's own read does."""
        if head := self._join.flush():  # a read before the body: the head goes alone
            self._send(head, timeout)
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
        send stamp (`stamps.note_written`; why before: rxstamps.KernelStampedStream.write).
        A request's head is kept and sent with its body (`stamps.HeadJoin`)."""
        buffer = self._join.take(buffer)
        if buffer:
            self._send(buffer, timeout)

    def _send(self, buffer: bytes, timeout: float | None) -> None:
        t_ns = perf_counter_ns()
        self._inner.write(buffer, timeout)
        note_written(t_ns)

    def close(self) -> None:
        """Close the connection."""
        self._inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        """TLS over this connection; its reads are noted too."""
        return BlockingArrivalStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        """httpcore's connection details (socket, addresses, is_readable, ...)."""
        return self._inner.get_extra_info(info)


class BlockingArrivalBackend(httpcore.NetworkBackend):
    """httpcore's blocking backend (its sockets, which Locust's gevent patches), with every
    connection an `BlockingArrivalStream`."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
                    ) -> httpcore.NetworkStream:
        """Connect to host:port (httpcore's errors)."""
        return BlockingArrivalStream(self._inner.connect_tcp(host, port, timeout, local_address,
                                                      socket_options), kernel=True)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
                            ) -> httpcore.NetworkStream:
        """Connect to the Unix socket `path` (httpcore's errors)."""
        return BlockingArrivalStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        """httpcore's retry back-off."""
        self._inner.sleep(seconds)


def arrival_transport() -> httpx.HTTPTransport:
    """A blocking httpx transport (no proxy from the environment) whose connections note when
    their bytes arrived, its replies bounded as the asyncio clients' are
    (`bounds.BlockingBoundedTransport`: no compression asked for, a line at most
    MAX_LINE_BYTES, at most MAX_DECODED_BYTES decoded); pass it as `transport=` to the
    httpx.Client given to `stream_chat`."""
    transport = BlockingBoundedTransport(trust_env=False)
    pool = getattr(transport, "_pool", None)
    if pool is not None and hasattr(pool, "_network_backend"):
        pool._network_backend = BlockingArrivalBackend()
    return transport
