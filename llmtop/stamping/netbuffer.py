"""The received blocks of one connection, each with its arrival stamp, and how they are read.

Shared by the two stamping streams (stamping/arrivals.py, stamps taken in `data_received`;
stamping/rxstamps.py, the kernel's receive stamps): both put (perf_counter_ns, bytes) blocks
into a `BlockBuffer` and httpcore reads them back through `read_block`, which notes the
arrival of the block it hands on (`stamps.note_arrival`; docs/method.md, "Chunk stamps").
"""

from __future__ import annotations

import asyncio
import collections
import select
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

import httpcore

from llmtop.stamping.stamps import note_arrival

HIGH_WATER = 1 << 20  # bytes buffered before the socket is no longer read (a slow consumer)


class BlockBuffer(asyncio.Protocol):
    """Collects (arrival perf_counter_ns, bytes) blocks; wakes the one waiting reader. As an
    asyncio protocol it stamps blocks in `data_received`; a stream reading its socket itself
    calls `add_block` and `end` instead."""

    def __init__(self) -> None:
        self.blocks: collections.deque[tuple[int, bytes]] = collections.deque()
        self.buffered = 0
        self.ended = False  # end of stream or connection lost
        self.error: BaseException | None = None
        self.transport: asyncio.Transport | None = None
        self.paused_reading = False
        self._reader: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None

    def add_block(self, t_ns: int, data: bytes) -> None:
        """A block of bytes that arrived at `t_ns` (perf_counter_ns)."""
        self.blocks.append((t_ns, data))
        self.buffered += len(data)
        wake(self._reader)

    def end(self, error: BaseException | None) -> None:
        """The end of the stream (`error` None) or of the connection."""
        self.ended = True
        self.error = error
        wake(self._reader)
        wake(self._writable)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.add_block(perf_counter_ns(), data)
        if self.buffered > HIGH_WATER and self.transport is not None:
            self.transport.pause_reading()
            self.paused_reading = True

    def eof_received(self) -> bool:
        self.ended = True
        wake(self._reader)
        return False  # let the transport close itself: HTTP/1.1 has nothing to say after EOF

    def connection_lost(self, exc: Exception | None) -> None:
        self.end(exc)

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        wake(self._writable)
        self._writable = None

    async def wait_readable(self) -> None:
        """Until a block or the end of the stream has arrived."""
        self._reader = asyncio.get_running_loop().create_future()
        try:
            await self._reader
        finally:
            self._reader = None

    async def wait_writable(self) -> None:
        """Until the transport's write buffer has drained below its high-water mark."""
        if self._writable is not None:
            await asyncio.shield(self._writable)


def wake(waiter: asyncio.Future[None] | None) -> None:
    """Resolve `waiter` (a reader's or writer's future) unless it is None or done."""
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


async def read_block(buf: BlockBuffer, max_bytes: int, timeout: float | None,  # noqa: ASYNC109
                     resume: Callable[[], None]) -> bytes:
    """At most `max_bytes` bytes of `buf` (b"" at the end of the stream), waiting up to
    `timeout` seconds (None: forever); notes the block's arrival for the open request, and
    calls `resume` once a paused buffer has drained to half of HIGH_WATER. Raises
    httpcore.ReadTimeout / ReadError."""
    if not buf.blocks and not buf.ended:
        try:
            async with asyncio.timeout(timeout):
                await buf.wait_readable()
        except TimeoutError as exc:
            raise httpcore.ReadTimeout(f"no bytes within {timeout} s") from exc
    if not buf.blocks:
        if buf.error is not None:
            raise httpcore.ReadError(str(buf.error) or type(buf.error).__name__) from buf.error
        return b""
    t_ns, data = buf.blocks.popleft()
    if len(data) > max_bytes:
        data, rest = data[:max_bytes], data[max_bytes:]
        buf.blocks.appendleft((t_ns, rest))
    buf.buffered -= len(data)
    if buf.paused_reading and buf.buffered <= HIGH_WATER // 2:
        buf.paused_reading = False
        resume()
    note_arrival(t_ns)
    return data


def socket_readable(sock: Any) -> bool:
    """Whether a recv on `sock` would return at once (bytes or the end); a socket without a
    descriptor counts as readable, as httpcore counts it (its next read would end)."""
    fd = sock.fileno() if sock is not None else -1
    if fd < 0:
        return True
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([fd], [], [], 0)[0])
