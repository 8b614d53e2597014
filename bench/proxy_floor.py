"""The lowest floor under any relay's CPU per request: a bare TCP forwarder, no HTTP at all.

    python bench/proxy_floor.py PORT UPSTREAM_PORT [--task]

Each accepted connection is paired with a new connection to 127.0.0.1:UPSTREAM_PORT and bytes
are copied both ways as they arrive (asyncio protocols on uvloop, as the relay's server
runs): per frame of a stream, one wake-up, one read and one write, which is what any relay
must do whatever its language or framework. bench/relay_overhead.py measures this process's
CPU per request next to the relay's and bench/sse_floor.py's, so the relay's figure can be
split into what this machine charges for waking up and what the relay's own code costs.

With --task the upstream's bytes are not written from the protocol's callback but handed to
one task per connection (a future set, the task woken, the write done there): the structure
of every relay that reads its upstream as an async iterator, with nothing else added, so the
difference is the price of one task wake-up per frame.
"""

from __future__ import annotations

import argparse
import asyncio

import uvloop


class _Pipe(asyncio.Protocol):
    """One direction's receiving end: what arrives is written to `peer` at once, or, when
    `queued`, kept for the task that `pump` runs."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: asyncio.Transport | None = None
        self.pending: list[bytes] = []
        self.queued: list[bytes] | None = None  # --task: the bytes the pump has not written
        self.waiter: asyncio.Future[None] | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.peer is None:
            self.pending.append(data)  # the upstream connection is not open yet
        elif self.queued is not None:
            self.queued.append(data)
            self._wake()
        else:
            self.peer.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._wake()
        if self.peer is not None and self.queued is None:
            self.peer.close()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def pump(self) -> None:
        """--task: write what arrives from the task, woken once per block, until closed."""
        assert self.queued is not None and self.peer is not None
        loop = asyncio.get_running_loop()
        while True:
            if self.queued:
                data = b"".join(self.queued)
                self.queued.clear()
                if not self.peer.is_closing():
                    self.peer.write(data)
            if self.closed:
                self.peer.close()
                return
            self.waiter = loop.create_future()
            await self.waiter


async def _serve(port: int, upstream_port: int, task: bool) -> None:
    loop = asyncio.get_running_loop()

    def accept() -> _Pipe:
        down = _Pipe()

        async def connect() -> None:
            _, up = await loop.create_connection(_Pipe, "127.0.0.1", upstream_port)
            up.peer, down.peer = down.transport, up.transport
            for data in down.pending:
                up.transport.write(data)  # type: ignore[union-attr]
            down.pending.clear()
            if task:
                up.queued = []
                await up.pump()

        loop.create_task(connect())
        return down

    server = await loop.create_server(accept, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("port", type=int)
    ap.add_argument("upstream_port", type=int)
    ap.add_argument("--task", action="store_true",
                    help="write the upstream's bytes from a task woken per block")
    a = ap.parse_args()
    uvloop.run(_serve(a.port, a.upstream_port, a.task))


if __name__ == "__main__":
    main()
