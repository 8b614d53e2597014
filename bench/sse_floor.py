"""The floor under the relay's CPU per request: a bare ASGI app under the same server.

    python bench/sse_floor.py PORT [--first-ms 50] [--chunks 20] [--gap-ms 10]

`POST /api/stream` (any body) answers with the frames the relay would send for the scripted
upstream's "timed" reply: `chunks` token frames, the first after first_ms, then gap_ms
apart, then a done frame; each one JSON-encoded and sent as one ASGI body message, woken by
a timer. No upstream, no parsing, no validation, no framework: one wakeup and one send per
frame is all it does, under `llmtop.commands.serving.QuietServer` (uvicorn, uvloop,
httptools), as the relay runs. bench/relay_overhead.py measures its CPU per request next to
the relay's, so the relay's number can be read against what any Python server pays on the
same machine for the same wakeups and writes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from time import perf_counter_ns
from typing import Any

import uvicorn

from llmtop.commands.serving import QuietServer

_dumps = json.JSONEncoder(separators=(",", ":")).encode


def make_app(first_s: float, chunks: int, gap_s: float) -> Any:
    """The bare ASGI app (lifespan answered, every HTTP request streamed)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        while (await receive()).get("more_body"):
            pass
        t0 = perf_counter_ns()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        await asyncio.sleep(first_s)
        for i in range(chunks):
            t = perf_counter_ns()
            data = {"content": f" t{i}", "thinking": "", "relay_recv_ns": t,
                    "relay_offset_ms": round((t - t0) / 1e6, 3)}
            await send({"type": "http.response.body", "more_body": True,
                        "body": b"event: token\ndata: " + _dumps(data).encode() + b"\n\n"})
            await asyncio.sleep(gap_s)
        await send({"type": "http.response.body", "more_body": False,
                    "body": b'event: done\ndata: {"done":true}\n\n'})

    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("port", type=int)
    ap.add_argument("--first-ms", type=float, default=50.0)
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--gap-ms", type=float, default=10.0)
    a = ap.parse_args()
    app = make_app(a.first_ms / 1e3, a.chunks, a.gap_ms / 1e3)
    config = uvicorn.Config(app, host="127.0.0.1", port=a.port, log_level="warning",
                            access_log=False)
    QuietServer(config).run()


if __name__ == "__main__":
    main()
