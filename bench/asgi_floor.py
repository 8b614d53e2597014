"""The floor under `llmtop watch`'s own libraries: uvicorn serving a bare ASGI app that passes
each request to one upstream through an aiohttp client session, measuring nothing.

    python bench/asgi_floor.py PORT UPSTREAM_URL

The same stack the watch runs (uvicorn with uvloop and httptools, aiohttp's client with a
kept-alive connector, the body read whole, the answer passed block by block as the socket gave
it) with none of the watch's own work: no Host/Origin checks, no header filtering beyond the
hop-by-hop framing, no stamps, no meter, no log. bench/watch_overhead.py times the watch
against it, so what the libraries cost and what llmtop's code adds are two separate figures.
"""

from __future__ import annotations

import sys
from typing import Any

import aiohttp
import uvicorn

FRAMING = (b"transfer-encoding", b"connection", b"keep-alive")


class Floor:
    """The bare pass-through (module docstring); `upstream`: a base URL such as
    http://127.0.0.1:11434."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.session: aiohttp.ClientSession | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                self.session = aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=0), auto_decompress=False)
                await send({"type": "lifespan.startup.complete"})
            if self.session is not None:
                await self.session.close()
            await send({"type": "lifespan.shutdown.complete"})
            return
        assert self.session is not None
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]
                   if k.lower() not in FRAMING and k.lower() != b"host"]
        async with self.session.request(scope["method"], self.upstream + scope["path"],
                                        data=body or None, headers=headers) as resp:
            await send({"type": "http.response.start", "status": resp.status,
                        "headers": [(k.lower(), v) for k, v in resp.raw_headers
                                    if k.lower() not in FRAMING]})
            async for block in resp.content.iter_any():
                await send({"type": "http.response.body", "body": block, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


if __name__ == "__main__":
    uvicorn.run(Floor(sys.argv[2]), host="127.0.0.1", port=int(sys.argv[1]),  # type: ignore[arg-type]
                log_level="warning", access_log=False, server_header=False, date_header=False)
