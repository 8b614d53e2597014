"""The relay's stream: upstream NDJSON lines (or an OpenAI upstream's SSE) in, preformatted
SSE frames out.

Upstream bytes (an aiohttp response's body, `content.iter_any()`: each block as the socket
gave it) are split into lines here and parsed with json's C decoder; events are written as
preformatted bytes (no pydantic, no per-event objects); the frames of one block of upstream
bytes go out as one ASGI body message, written to the socket as sent. Every failure becomes
one `error` frame whose kind, message and remedy come from `llmtop.engines.http`, the same
words `OllamaEngine` uses for a direct request.
The frames' fields are listed in `llmtop.servers.relay.server`'s docstring.

Bounds, the engines' clients' (stamping/bounds.py; docs/hostile-input.md): an upstream line
past MAX_LINE_BYTES without its newline ends the stream with a `limit` error frame (NDJSON
here; SSE through bounds.bound_reply, which also bounds a gzip reply sent anyway); more text
chunks than the request's num_predict allows (StreamJob.max_chunks) end it with a
`protocol` one; an error reply's body is read to at most ERROR_BODY_BYTES. Compression is
never asked for (upstream.py); an NDJSON reply compressed anyway is not decoded (its bytes
are no protocol), an SSE one is, bounded.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from json.encoder import encode_basestring
from time import perf_counter_ns
from typing import Any

import aiohttp
import anyio
import httpx
from httpx_sse import EventSource, ServerSentEvent, SSEError

from llmtop.engines.events import Failure
from llmtop.engines.http import (
    failure_for_http,
    failure_for_transport,
    failure_in_stream,
    failure_past_predict,
    failure_protocol,
    failure_truncated,
    server_error,
)
from llmtop.engines.openai_stream import ChunkReader, StreamError, error_body_text
from llmtop.servers.relay.request import dumps
from llmtop.servers.relay.upstream import (
    CONNECT_DONE,
    CONNECT_START,
    UPSTREAM_ERRORS,
    Relay,
    UpstreamCall,
    upstream_failure,
)
from llmtop.stamping.bounds import MAX_LINE_BYTES, ReplyTooLarge, bound_reply

DRAIN_TIMEOUT_S = 0.5  # reading the upstream's body end after its done line
ERROR_BODY_BYTES = 64 * 1024  # read of an error reply's body (a JSON error is a few hundred)
_TOKEN = b"event: token\ndata: "
_END = b"\n\n"
_DROP_FROM_DONE = ("message", "response", "context")
_decode = json.JSONDecoder().decode
# A token frame's text, as `frame("token", {...})` writes it, byte for byte: the two texts as
# JSON strings (json's C encoder, ensure_ascii off, as `dumps`), the offset as float repr.
_TOKEN_FMT = ('event: token\ndata: {"content":%s,"thinking":%s,"relay_recv_ns":%d,'
              '"relay_offset_ms":%r}\n\n')


def frame(event: str, data: dict[str, Any]) -> bytes:
    """One SSE frame: `event: NAME`, `data: JSON`, a blank line."""
    return b"event: " + event.encode() + b"\ndata: " + dumps(data).encode() + _END


def ms_since(t_ns: int, t0_ns: int) -> float:
    """Milliseconds from t0_ns to t_ns (perf_counter ns), rounded to the µs."""
    return round((t_ns - t0_ns) / 1e6, 3)


def error_frame(relay: Relay, failure: Failure, t0: int, *, error: str | None = None,
                status: int | None = None) -> bytes:
    """The `error` frame: the failure, the upstream's own message and status when it sent
    them, the upstream's URL and the time since the relay received the request."""
    return frame("error", {
        "kind": failure.kind.value,
        "message": failure.message,
        "remedy": failure.remedy,
        "error": error,
        "status": status,
        "upstream": relay.upstream,
        "relay_offset_ms": ms_since(perf_counter_ns(), t0),
    })


async def status_frame(relay: Relay, call: UpstreamCall,
                       response: aiohttp.ClientResponse) -> bytes:
    """The `error` frame for an upstream that answered with a status other than 200."""
    body = await _error_body(response)
    status = response.status
    installed = await relay.model_names() if status == 404 else []
    failure = failure_for_http(status, body, peer=relay.peer, model=call.job.model,
                               installed=installed)
    return error_frame(relay, failure, call.t0, error=server_error(body), status=status)


async def _error_body(response: aiohttp.ClientResponse) -> bytes:
    """The first ERROR_BODY_BYTES of an error reply's body (its message is quoted from the
    first ERROR_TEXT_CHARS; an upstream that answers 500 with a gigabyte is not held)."""
    body = b""
    while len(body) < ERROR_BODY_BYTES:
        part = await response.content.read(ERROR_BODY_BYTES - len(body))
        if not part:
            break
        body += part
    return body


def _texts(obj: dict[str, Any], chat: bool) -> tuple[str, str]:
    """(content, thinking) of one upstream chunk; raises AttributeError for a non-object."""
    source = (obj.get("message") or {}) if chat else obj
    text = source.get("content") if chat else source.get("response")
    return text or "", source.get("thinking") or ""


def _done_frame(relay: Relay, call: UpstreamCall, obj: dict[str, Any], texts: tuple[str, str],
                t: int) -> bytes:
    """The `done` frame: the upstream's final chunk unchanged but for its text, plus the
    relay's own timings (ms since the relay received the request)."""
    t0, marks = call.t0, call.marks
    connected = CONNECT_DONE in marks
    done = {k: v for k, v in obj.items() if k not in _DROP_FROM_DONE}
    done.update(
        content=texts[0],
        thinking=texts[1],
        relay_recv_ns=t,
        relay_offset_ms=ms_since(t, t0),
        relay_parse_ms=ms_since(call.t_send, t0),
        upstream_headers_ms=ms_since(call.t_headers, t0),
        relay_first_chunk_ms=ms_since(call.first_ns or t, t0),
        relay_ttft_ms=ms_since(call.text_ns, t0) if call.text_ns is not None else None,
        relay_request_ms=ms_since(t, t0),
        upstream_connect_ms=(
            ms_since(marks[CONNECT_DONE], marks.get(CONNECT_START, call.t_send))
            if connected else None
        ),
        upstream_connection="new" if connected else "reused",
        relay_chunks=call.sent,
        upstream=relay.upstream,
    )
    return frame("done", done)


def line_frame(relay: Relay, call: UpstreamCall, line: bytes, t: int) -> tuple[bytes, bool]:
    """One upstream NDJSON line, complete at perf_counter ns `t` → (SSE frame, final?)."""
    try:
        obj = _decode(line.decode())  # NDJSON is UTF-8; a bad byte is a protocol error
        texts = _texts(obj, call.job.chat)
    except (ValueError, AttributeError):
        shown = line[:120].decode(errors="replace")
        detail = f"a line that is not Ollama's protocol: {shown!r}"
        return error_frame(relay, failure_protocol(detail, peer=relay.peer), call.t0), True
    if "error" in obj:
        error = str(obj["error"])
        failure = failure_in_stream(error, peer=relay.peer)
        return error_frame(relay, failure, call.t0, error=error), True
    if call.first_ns is None:
        call.first_ns = t
    if call.text_ns is None and (texts[0] or texts[1]):
        call.text_ns = t
    if obj.get("done"):
        return _done_frame(relay, call, obj, texts, t), True
    call.sent += 1
    past = _past_predict(relay, call)
    if past is not None:
        return past, True
    return token_frame(texts, t, call.t0), False


def _past_predict(relay: Relay, call: UpstreamCall) -> bytes | None:
    """The error frame that ends a stream once it has relayed more text chunks than its
    num_predict allows (StreamJob.max_chunks, as a direct request's `run_request`); None
    while within it. An upstream that never sends done is not relayed forever."""
    most = call.job.max_chunks
    if most is None or call.sent <= most:
        return None
    return error_frame(relay, failure_past_predict(call.sent, call.job.num_predict), call.t0)


def _line_too_long(relay: Relay, call: UpstreamCall, held: int) -> bytes | None:
    """The error frame for an upstream line past MAX_LINE_BYTES without its newline (`held`
    bytes held so far), as the engines' clients name it (stamping/bounds.py); else None."""
    if held <= MAX_LINE_BYTES:
        return None
    too_long = ReplyTooLarge(f"a line longer than {MAX_LINE_BYTES // 2**20} MiB")
    return error_frame(relay, failure_for_transport(too_long, peer=relay.peer), call.t0)


def token_frame(texts: tuple[str, str], t: int, t0: int) -> bytes:
    """The `token` frame for (content, thinking) received at perf_counter ns `t`, the request
    having arrived at `t0`: the same bytes as `frame("token", {...})`, built with one format
    (it runs for every chunk; `frame` costs about twice as much)."""
    content, thinking = texts
    if type(content) is not str or type(thinking) is not str:  # not text: as JSON has it
        return frame("token", {"content": content, "thinking": thinking, "relay_recv_ns": t,
                               "relay_offset_ms": ms_since(t, t0)})
    return (_TOKEN_FMT % (encode_basestring(content), encode_basestring(thinking), t,
                          round((t - t0) / 1e6, 3))).encode()


async def events(relay: Relay, call: UpstreamCall) -> AsyncIterator[bytes]:
    """The SSE byte frames for one request. Never raises for the upstream's misbehaviour;
    always ends with exactly one `done` or `error` frame, unless the client leaves first."""
    try:
        response = await call.response()
        if response.status != 200:
            yield await status_frame(relay, call, response)
            return
        relayed = _relay_sse if relay.api == "openai" else _relay_lines
        async for out in relayed(relay, call, response):
            yield out
    except UPSTREAM_ERRORS as exc:
        yield error_frame(relay, upstream_failure(exc, peer=relay.peer), call.t0)
    except SSEError as exc:  # an OpenAI upstream's 200 that is not text/event-stream
        yield error_frame(relay, failure_protocol(str(exc), peer=relay.peer), call.t0)
    except ReplyTooLarge as exc:  # an SSE reply past a bound (bounds.bound_reply)
        yield error_frame(relay, failure_for_transport(exc, peer=relay.peer), call.t0)
    finally:
        # Runs on success, on error and when the client left (the generator is cancelled
        # at its await, or closed at its yield): close the upstream response, which closes
        # a connection whose body was not read to the end, so the engine notices and
        # stops generating.
        await call.close()


async def _relay_lines(relay: Relay, call: UpstreamCall, response: aiohttp.ClientResponse,
                       ) -> AsyncIterator[bytes]:
    """The frames of a 200 upstream stream, ending with its final frame (done, error, or a
    truncation error when the body ends without a done line). A chunk is stamped when its
    block of bytes is handed over (`iter_any`), before its line is split or parsed."""
    # Split lines ourselves (bytes in, one UTF-8 decode and json's C decoder per line): fewer
    # layers than a line reader's, on the path of every token.
    chunks = response.content.iter_any()
    buf = b""
    async for raw in chunks:
        t = perf_counter_ns()
        buf = buf + raw if buf else raw
        if b"\n" not in buf:
            too_long = _line_too_long(relay, call, len(buf))
            if too_long is not None:
                yield too_long
                return
            continue
        *lines, buf = buf.split(b"\n")
        outs: list[bytes] = []
        final = False
        for line in lines:
            if not line.strip():
                continue
            out, final = line_frame(relay, call, line, t)
            outs.append(out)
            if final:
                break
        too_long = None if final else _line_too_long(relay, call, len(buf))
        if too_long is not None:  # the line after this block's last newline: too long already
            outs.append(too_long)
            final = True
        if outs:  # the chunks of one block go out in one send (one write to the socket)
            yield outs[0] if len(outs) == 1 else b"".join(outs)
        if final:
            # After done: read the rest of the body (the chunked terminator, already on its
            # way): aiohttp hands a connection back to its pool once the body is read to its
            # end, so the next request reuses it instead of reconnecting inside its TTFT.
            with anyio.move_on_after(DRAIN_TIMEOUT_S):
                async for _ in chunks:
                    pass
            return
    if buf.strip():  # a last line without its newline
        out, final = line_frame(relay, call, buf, perf_counter_ns())
        yield out
        if final:
            return
    yield error_frame(relay, failure_truncated(relay.peer), call.t0)


# ---------------------------------------------------------------------- an OpenAI upstream


class _Body(httpx.AsyncByteStream):
    """An aiohttp response's body as an httpx byte stream: httpx-sse's `EventSource` parses
    an `httpx.Response`, here one that only carries the status, headers and these bytes."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for block in self._response.content.iter_any():
            yield block

    async def aclose(self) -> None:
        """Nothing: the relay closes the upstream response itself (`UpstreamCall.close`)."""


def sse_source(response: aiohttp.ClientResponse) -> EventSource:
    """httpx-sse's EventSource over an aiohttp response (status, headers, streamed body),
    its body bounded as the engines' clients read theirs (`bounds.bound_reply`: a line past
    MAX_LINE_BYTES, or a gzip reply sent anyway inflating past MAX_DECODED_BYTES, raises
    ReplyTooLarge; httpx's line decoder would join a line in memory, and its decoder inflate
    a reply whole). Raises ReplyTooLarge for an encoding llmtop does not decode."""
    return EventSource(bound_reply(httpx.Response(response.status, headers=response.raw_headers,
                                                  stream=_Body(response))))


async def _relay_sse(relay: Relay, call: UpstreamCall, response: aiohttp.ClientResponse,
                     ) -> AsyncIterator[bytes]:
    """The frames of a 200 OpenAI-compatible stream (SSE parsed by httpx-sse, chunks read
    by `ChunkReader`), ending with its final frame: `done` at `[DONE]` (or at the body's end
    after a finish_reason), with the server's figures mapped onto Ollama's names; else an
    error or truncation frame."""
    reader = ChunkReader()
    sse_events = sse_source(response).aiter_sse()  # SSEError for another content type
    async for sse in sse_events:
        t = perf_counter_ns()
        out, final = sse_frame(relay, call, reader, sse, t)
        if out is not None:
            yield out
        if final:
            with anyio.move_on_after(DRAIN_TIMEOUT_S):  # keep the pooled connection reusable
                async for _ in sse_events:
                    pass
            return
    if reader.finish_reason is not None:  # closed after its finish chunk, without [DONE]
        yield _openai_done(relay, call, reader, perf_counter_ns())
        return
    yield error_frame(relay, failure_truncated(relay.peer), call.t0)


def _openai_done(relay: Relay, call: UpstreamCall, reader: ChunkReader, t: int) -> bytes:
    stats = {**reader.stats().to_dict(), "done": True, "notes": list(call.job.notes)}
    return _done_frame(relay, call, stats, ("", ""), t)


def sse_frame(relay: Relay, call: UpstreamCall, reader: ChunkReader, sse: ServerSentEvent,
              t: int) -> tuple[bytes | None, bool]:
    """One upstream SSE event, yielded by httpx-sse at perf_counter ns `t` → (frame or None
    for an event that carries no text, final?)."""
    if sse.event == "error":
        error = error_body_text(sse.data)
        return error_frame(relay, failure_in_stream(error, peer=relay.peer), call.t0,
                           error=error), True
    if not sse.data:
        return None, False
    if sse.data.strip() == "[DONE]":
        if reader.finish_reason is None:
            return error_frame(relay, failure_truncated(relay.peer), call.t0), True
        return _openai_done(relay, call, reader, t), True
    try:
        texts = reader.read(json.loads(sse.data))
    except StreamError as exc:
        return error_frame(relay, failure_in_stream(str(exc), peer=relay.peer), call.t0,
                           error=str(exc)), True
    except (ValueError, TypeError, AttributeError, IndexError) as exc:
        detail = f"an event that is not OpenAI's protocol: {type(exc).__name__}: {exc}"
        return error_frame(relay, failure_protocol(detail, peer=relay.peer), call.t0), True
    if call.first_ns is None:
        call.first_ns = t
    if not (texts[0] or texts[1]):
        return None, False
    if call.text_ns is None:
        call.text_ns = t
    call.sent += 1
    past = _past_predict(relay, call)
    if past is not None:
        return past, True
    return token_frame(texts, t, call.t0), False
