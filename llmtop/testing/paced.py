"""An in-process engine with exact, scripted timings that change from request to request, for
tests and benchmarks of the bench's slow-episode finder and re-measuring.

Not a server: it has the `Engine` protocol's streaming surface and answers every prompt
with a generated reply whose timeline is known exactly. Its stamps are virtual: each request
starts `STEP_NS` after the previous on the engine's own clock (`clock`, a `perf_counter_ns`
stand-in), and each event is stamped at its offset from that start. A test that patches
`llmtop.sessions.measure.request.perf_counter_ns` with `clock` gets TTFT, E2E and decode
figures exactly as written here, whatever the machine's load.

Timeline of a reply with n output tokens and slowdown factor f (ms after its send):
load `load_ms`, prefill `prefill_ms_per_token` per prompt token, then `overhead_ms`, then
the first token, then one token every `gap_ms`, and the done chunk one gap after the last;
every duration × f. The server's statistics say the same: prompt_eval_count =
TEMPLATE_TOKENS + the prompt's words (so calibration converges), eval_count = n,
eval_duration = n × gap_ms × f. They fit inside the client's clock (load + prefill + decode
≤ E2E: sessions/measure/telemetry.py sets aside durations that do not), which is why the
done chunk comes a whole gap after the last token, not at once.

`factor(j)` gives f for the j-th *decoding* request (num_predict ≥ 3, from 0: a bench's
warm-ups first, then its measured requests); calibration probes and the bench's first
short request (num_predict ≤ 2) are never slowed.

Over the wire (the end of this module): `LineServer`, a real HTTP server that writes a paced
reply (`ollama_paced_reply`: Ollama's lines with the figures as paced), and `BlockProxy`, a
proxy in front of it that forwards the reply in blocks of 4096 bytes, as nginx does by
default: a stream whose chunks all arrive, bunched.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

from llmtop.engines.base import ModelInfo
from llmtop.engines.connection import Connection
from llmtop.engines.events import ServerStats, StreamEvent

MS = 1_000_000
START_NS = 10**12
STEP_NS = 10**10  # each reply starts 10 s (virtual) after the previous one
TEMPLATE_TOKENS = 19  # the chat template's cost: prompt_eval_count = 19 + words


@dataclass(frozen=True)
class Pace:
    """An unslowed reply's timeline, ms (module docstring)."""

    load_ms: float = 2.0
    prefill_ms_per_token: float = 0.5
    overhead_ms: float = 5.0
    gap_ms: float = 10.0


class VirtualClock:
    """A `perf_counter_ns` stand-in that returns `now`, which the engine moves."""

    def __init__(self) -> None:
        self.now = START_NS

    def __call__(self) -> int:
        return self.now


def episodes(*spans: tuple[int, int], slower: float, warmup: int = 1) -> Callable[[int], float]:
    """A `factor` that slows measured requests first…last (1-based, inclusive, as the bench
    numbers them after `warmup` warm-ups) by `slower` (1.3: every duration 30 % longer).
    Raises ValueError for a span that is empty or starts before request 1."""
    for first, last in spans:
        if first < 1 or last < first:
            raise ValueError(
                f"an episode spans requests first…last with 1 ≤ first ≤ last, not {first}…{last}"
            )

    def factor(j: int) -> float:
        number = j - warmup + 1
        return slower if any(a <= number <= b for a, b in spans) else 1.0

    return factor


def trend(per_request: float, warmup: int = 1) -> Callable[[int], float]:
    """A `factor` that grows by `per_request` per measured request (0.01: +1 % each,
    compounding), 1.0 for the warm-ups."""
    return lambda j: (1.0 + per_request) ** max(0, j - warmup)


class PacedEngine:
    """The streaming surface of an engine with scripted timings (module docstring)."""

    name = "paced"
    host = "http://paced:1"

    def __init__(
        self, pace: Pace | None = None, factor: Callable[[int], float] | None = None
    ) -> None:
        self.pace = pace or Pace()
        self.factor = factor or (lambda _j: 1.0)
        self.clock = VirtualClock()
        self.replies = 0
        self.decoding = 0

    def _reply(self, prompt: str, options: Mapping[str, Any]) -> list[StreamEvent]:
        p = self.pace
        self.replies += 1
        base = START_NS + self.replies * STEP_NS
        self.clock.now = base
        n_out = int(options.get("num_predict", 8))
        f = 1.0
        if n_out >= 3:
            f = self.factor(self.decoding)
            self.decoding += 1
        tokens = TEMPLATE_TOKENS + len(prompt.split())
        load, prefill, gap = p.load_ms * f, tokens * p.prefill_ms_per_token * f, p.gap_ms * f
        first = load + prefill + p.overhead_ms * f

        def at(ms: float, **kw: Any) -> StreamEvent:
            return StreamEvent(t_ns=base + round(ms * MS), **kw)

        events = [at(first + i * gap, content=f" w{i}") for i in range(n_out)]
        stats = ServerStats(
            total_duration=round((load + prefill + n_out * gap) * MS),
            load_duration=round(load * MS),
            prompt_eval_count=tokens,
            prompt_eval_duration=round(prefill * MS),
            eval_count=n_out,
            eval_duration=round(n_out * gap * MS),
            done_reason="length",
        )
        return [*events, at(first + n_out * gap, done=True, stats=stats)]

    def stream_chat(
        self,
        model: str,
        messages: list[Mapping[str, Any]],
        *,
        options: Mapping[str, Any] | None = None,
        think: bool | str | None = None,
        keep_alive: float | str | None = None,
    ) -> AsyncGenerator[StreamEvent, None]:
        """Replay a generated reply to the last message (module docstring); `think` and
        `keep_alive` change nothing."""
        events = self._reply(str(messages[-1]["content"]), options or {})

        async def gen() -> AsyncGenerator[StreamEvent, None]:
            for event in events:
                await asyncio.sleep(0)
                yield event

        return gen()

    async def version(self) -> str:
        """The engine's version string."""
        return "0.0.0-paced"

    async def list_models(self) -> list[str]:
        """The one model it serves."""
        return ["paced"]

    async def model_info(self, model: str) -> ModelInfo:
        """A small model's details."""
        return ModelInfo(name=model, parameter_size="1.0M", quantization="Q4_K_M")

    async def aclose(self) -> None:
        """Nothing to close."""


def paced_connection(engine: PacedEngine) -> Connection:
    """A real `Connection` around a `PacedEngine` (no child process, no engine pids)."""
    return Connection(
        engine=engine,
        model="paced",
        info=ModelInfo(name="paced", parameter_size="1.0M", quantization="Q4_K_M"),
        version="0.0.0-paced",
    )


# ------------------------------------------------------------------ paced over the wire
#
# A stream as a real server sends it, and a proxy in front that forwards it in blocks of
# bytes: the case `timeline.blocks` recognises, made exact. Both are plain asyncio servers on
# 127.0.0.1 that run in the caller's event loop.

BLOCK_BYTES = 4096  # nginx's proxy_buffer_size default: one memory page (4 or 8 KiB)


@dataclass(frozen=True)
class WireReply:
    """What `LineServer` answers every request with: the body's pieces as (delay before it
    in s, bytes), each written as one chunk of a chunked body, under `content_type`."""

    pieces: tuple[tuple[float, bytes], ...]
    content_type: str = "application/x-ndjson"


def ollama_paced_reply(tokens: int, *, first_ms: float, gap_ms: float, load_ms: float = 1.0,
                       prompt_tokens: int = 20) -> WireReply:
    """Ollama `/api/chat` lines for `tokens` tokens, one a line, each of the same length (text
    " w000", " w001", …): the first `first_ms` after the request, the rest `gap_ms` apart,
    then the done line at once, with the server's figures as paced — load `load_ms`, then
    `prompt_tokens` of prompt, then each token in `gap_ms`: prompt_eval_duration = first_ms −
    gap_ms − load_ms, eval_count = tokens, eval_duration = tokens × gap_ms, total_duration =
    first_ms + (tokens − 1) × gap_ms (when the done line leaves). Raises ValueError when
    first_ms leaves no time for the load and the first token."""
    prompt_ms = first_ms - gap_ms - load_ms
    if prompt_ms < 0:
        raise ValueError(f"first_ms {first_ms} leaves no time for the load and the first "
                         f"token: make it at least gap_ms + load_ms ({gap_ms + load_ms})")
    if tokens < 1:
        raise ValueError(f"a paced reply has at least 1 token, not {tokens}")

    def line(obj: dict[str, Any]) -> bytes:
        return json.dumps({"model": "paced", "created_at": "2026-01-01T00:00:00Z", **obj},
                          separators=(",", ":")).encode() + b"\n"

    def token(i: int) -> bytes:
        return line({"message": {"role": "assistant", "content": f" w{i:03d}"}, "done": False})

    done = line({"message": {"role": "assistant", "content": ""}, "done": True,
                 "done_reason": "stop",
                 "total_duration": round((first_ms + (tokens - 1) * gap_ms) * MS),
                 "load_duration": round(load_ms * MS), "prompt_eval_count": prompt_tokens,
                 "prompt_eval_duration": round(prompt_ms * MS), "eval_count": tokens,
                 "eval_duration": round(tokens * gap_ms * MS)})
    pieces = [(first_ms / 1e3, token(0))]
    pieces += [(gap_ms / 1e3, token(i)) for i in range(1, tokens)]
    return WireReply((*pieces, (0.0, done)))


def chunked(piece: bytes) -> bytes:
    """One chunk of a chunked HTTP/1.1 body (RFC 9112, 7.1)."""
    return b"%x\r\n%s\r\n" % (len(piece), piece)


class _Loopback:
    """A server on 127.0.0.1 in the caller's event loop: `start()` listens on a free port
    (returned, and kept in `port`), `stop()` stops listening; `_serve` answers a connection."""

    port = 0
    _server: asyncio.Server | None = None

    async def start(self) -> int:
        """Listen on 127.0.0.1 (a free port, returned)."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class LineServer(_Loopback):
    """A scripted HTTP/1.1 server that answers every request (any method and path; a body by
    its Content-Length) with `reply`, paced, then closes the connection: a proxy in front
    knows the answer's end by the close. `sent`: each answer's bytes as written (head and
    chunk framing included), the truth a test computes the proxy's blocks from; `bodies`:
    each request's body."""

    HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n")

    def __init__(self, reply: WireReply) -> None:
        self.reply = reply
        self.sent: list[bytes] = []
        self.bodies: list[bytes] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(v) for k, _, v in (h.partition(b":") for h in head.split(b"\r\n"))
                           if k.strip().lower() == b"content-length"), 0)
            self.bodies.append(await reader.readexactly(length))
            out = [self.HEAD % self.reply.content_type.encode()]
            writer.write(out[0])
            for delay, piece in self.reply.pieces:
                if delay:
                    await asyncio.sleep(delay)
                out.append(chunked(piece))
                writer.write(out[-1])
                await writer.drain()
            out.append(b"0\r\n\r\n")
            writer.write(out[-1])
            await writer.drain()
            self.sent.append(b"".join(out))
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()


class BlockProxy(_Loopback):
    """A TCP proxy that passes the client's bytes on at once and holds the server's until
    `block` bytes have collected, then writes them `block` bytes at a time; what is left goes
    when the server closes (nginx with `proxy_buffering on`, its default). `flushes`:
    (perf_counter_ns, bytes) of each write to the client, in order."""

    def __init__(self, upstream_port: int, block: int = BLOCK_BYTES) -> None:
        self.upstream_port = upstream_port
        self.block = block
        self.flushes: list[tuple[int, int]] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
                     ) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        forward = asyncio.create_task(self._forward(client_r, up_w))
        held = b""
        try:
            while data := await up_r.read(1 << 16):
                held += data
                while len(held) >= self.block:
                    await self._flush(client_w, held[:self.block])
                    held = held[self.block:]
            if held:
                await self._flush(client_w, held)
        except ConnectionError:
            pass
        finally:
            forward.cancel()
            client_w.close()
            up_w.close()

    async def _flush(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        self.flushes.append((perf_counter_ns(), len(data)))
        writer.write(data)
        await writer.drain()

    @staticmethod
    async def _forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(1 << 16):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
