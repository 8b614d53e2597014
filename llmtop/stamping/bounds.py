"""Bounded replies: what an upstream may make llmtop hold in memory.

Every client llmtop measures through reads its replies through `BoundedTransport`
(arrivals.measured_transport), which

* asks for no compression (`Accept-Encoding: identity`: a stream compressed costs CPU inside
  the measurement and hides a chunk's arrival in the decoder's buffer);
* decompresses a gzip or deflate reply itself, sent anyway, in pieces of at most
  INFLATE_PIECE_BYTES, and stops at MAX_DECODED_BYTES decoded (a gzip bomb of 1 MB on the
  wire inflates to a gigabyte; a compressed reply of a local engine is never near the limit);
  any other encoding (br, zstd) is refused;
* refuses a redirect to another host (`OffHostRedirect`: the `ollama` client follows
  redirects, and a 307 elsewhere was named as this server's 404);
* stops a reply whose line grows past MAX_LINE_BYTES without a newline (NDJSON and SSE are
  line protocols; httpx's line decoder would join an endless line in memory).

The blocking client of Locust's users (loadtest/stream.py) reads through
`BlockingBoundedTransport`, the same rules for httpx.Client (stamping/blocking.py builds it).
llmtop's relay reads its upstream with aiohttp; it applies MAX_LINE_BYTES itself
(servers/relay/stream.py) and asks for no compression (it decodes none).

Past a bound the stream raises `ReplyTooLarge` (an httpx.ReadError, so any caller that
handles a broken stream handles it); the engines name it as a FailureKind.LIMIT
(engines/http.py, `failure_for_transport`). The rows are in docs/hostile-input.md,
"Unbounded input from an upstream".
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import httpx

MAX_LINE_BYTES = 16 * 1024 * 1024  # as the session log's reader (records/log.py)
# Chunks past num_predict: a chunk is one token from Ollama and llama.cpp, rarely less (a
# character split over two); twice what was asked, plus a margin, is a server that is not
# stopping where it was told to.
PAST_PREDICT_FACTOR = 2
PAST_PREDICT_MARGIN = 16
MAX_DECODED_BYTES = 64 * 1024 * 1024
INFLATE_PIECE_BYTES = 64 * 1024
_ZLIB_WBITS: dict[str, int] = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS,
               "deflate": 32 + zlib.MAX_WBITS}  # 32+: a zlib or gzip header, detected


def chunk_limit(options: Mapping[str, Any]) -> int | None:
    """The most text chunks a request asking for `options["num_predict"]` tokens is read for
    (PAST_PREDICT_FACTOR × num_predict + PAST_PREDICT_MARGIN); None when it set no positive
    limit (-1: until the context fills). Applied by `run_request` (sessions/measure), the
    Locust user (loadtest/stream.py) and the relay (servers/relay/stream.py)."""
    predict = options.get("num_predict")
    if isinstance(predict, int) and not isinstance(predict, bool) and predict > 0:
        return PAST_PREDICT_FACTOR * predict + PAST_PREDICT_MARGIN
    return None


class ReplyTooLarge(httpx.ReadError):
    """A reply past one of this module's bounds; the message says which and how far."""


class OffHostRedirect(httpx.ReadError):
    """A redirect (3xx with a Location) to another host, port or scheme: a client that
    follows it (the `ollama` client does) would measure that other server, and name its
    answer as this one's. `status` and `location` are the reply's."""

    def __init__(self, status: int, location: str, request: httpx.Request) -> None:
        super().__init__(f"a redirect (HTTP {status}) to {location}", request=request)
        self.status = status
        self.location = location


class _Bounds:
    """The counting both streams share: `pieces(block)` gives a block of the raw reply as
    its decoded pieces (decoded with `wbits` when given: a zlib/gzip stream), raising
    ReplyTooLarge past `max_decoded` bytes decoded or a line past `max_line` bytes."""

    def __init__(self, wbits: int | None, max_line: int, max_decoded: int) -> None:
        self._inflate = zlib.decompressobj(wbits) if wbits is not None else None
        self._max_line = max_line
        self._max_decoded = max_decoded
        self._decoded = 0
        self._line = 0  # bytes since the last newline

    def _inflated(self, block: bytes) -> list[bytes]:
        if self._inflate is None:
            return [block]
        try:
            pieces = [self._inflate.decompress(block, INFLATE_PIECE_BYTES)]
            while self._inflate.unconsumed_tail:
                pieces.append(self._inflate.decompress(self._inflate.unconsumed_tail,
                                                       INFLATE_PIECE_BYTES))
                if len(pieces) * INFLATE_PIECE_BYTES > self._max_decoded:
                    break  # the count in `pieces` raises
        except zlib.error as exc:
            raise ReplyTooLarge(f"a compressed reply that does not decompress ({exc})") from exc
        return pieces

    def pieces(self, block: bytes) -> Iterator[bytes]:
        """`block`'s decoded pieces, each checked against the bounds before it is given."""
        for piece in self._inflated(block):
            if self._inflate is not None:
                self._decoded += len(piece)
                if self._decoded > self._max_decoded:
                    raise ReplyTooLarge(
                        f"a compressed reply that inflates past {self._max_decoded // 2**20} MiB")
            end = piece.rfind(b"\n")
            self._line = self._line + len(piece) if end < 0 else len(piece) - end - 1
            if self._line > self._max_line:
                raise ReplyTooLarge(f"a line longer than {self._max_line // 2**20} MiB")
            yield piece


class ReplyBounds(_Bounds):
    """The same bounds for a reader that is handed a reply's raw blocks itself (`llmtop
    watch`'s meter): `pieces(block)` decodes and checks them; `wbits_for(encoding)` is the
    zlib window for a Content-Encoding it decodes (gzip, deflate), None for any other."""

    @staticmethod
    def wbits_for(encoding: str) -> int | None:
        """The zlib `wbits` that decodes `encoding` (lower-case), None for identity or one
        not decoded here."""
        return _ZLIB_WBITS.get(encoding)


class BoundedStream(httpx.AsyncByteStream):
    """`raw`'s bytes (decoded with `wbits` when given: a zlib/gzip stream), raising
    ReplyTooLarge past MAX_DECODED_BYTES decoded or a line past MAX_LINE_BYTES."""

    def __init__(self, raw: httpx.AsyncByteStream, wbits: int | None,
                 max_line: int = MAX_LINE_BYTES, max_decoded: int = MAX_DECODED_BYTES) -> None:
        self._raw = raw
        self._bounds = _Bounds(wbits, max_line, max_decoded)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for block in self._raw:
            for piece in self._bounds.pieces(block):
                yield piece

    async def aclose(self) -> None:
        """Close the raw stream (the connection goes back to the pool or is closed)."""
        await self._raw.aclose()


class BlockingBoundedStream(httpx.SyncByteStream):
    """BoundedStream for a blocking client (Locust's users: loadtest/stream.py)."""

    def __init__(self, raw: httpx.SyncByteStream, wbits: int | None,
                 max_line: int = MAX_LINE_BYTES, max_decoded: int = MAX_DECODED_BYTES) -> None:
        self._raw = raw
        self._bounds = _Bounds(wbits, max_line, max_decoded)

    def __iter__(self) -> Iterator[bytes]:
        for block in self._raw:
            yield from self._bounds.pieces(block)

    def close(self) -> None:
        """Close the raw stream."""
        self._raw.close()


def _off_host(request: httpx.Request, response: httpx.Response) -> str | None:
    """The target of a redirect `response` to another host, port or scheme, else None."""
    location = response.headers.get("location")
    if 300 <= response.status_code < 400 and location:
        target = request.url.join(location)
        if (target.scheme, target.host, target.port) != (
                request.url.scheme, request.url.host, request.url.port):
            return str(target)
    return None


def _wbits(response: httpx.Response) -> int | None | str:
    """The zlib window bits to decode `response` with (None: not compressed; the header
    removed when it is), or the encoding's name when llmtop does not decode it."""
    encoding = str(response.headers.get("content-encoding", "identity")).strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding not in _ZLIB_WBITS:
        return encoding
    del response.headers["content-encoding"]
    return _ZLIB_WBITS[encoding]


def _refused_encoding(encoding: str) -> ReplyTooLarge:
    return ReplyTooLarge(f"a reply in the {encoding!r} encoding, which llmtop did not ask for "
                         "and does not decode")


def bound_reply(response: httpx.Response) -> httpx.Response:
    """`response` (an asyncio stream's) with its body read through a BoundedStream, decoded
    when it is gzip or deflate (the Content-Encoding header then removed, so httpx does not
    decode it again, unbounded). Raises ReplyTooLarge for another encoding. The relay wraps
    its OpenAI upstream's body so (servers/relay/stream.py)."""
    wbits = _wbits(response)
    if isinstance(wbits, str):
        raise _refused_encoding(wbits)
    assert isinstance(response.stream, httpx.AsyncByteStream)  # an asyncio stream's
    response.stream = BoundedStream(response.stream, wbits)
    return response


class BoundedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport with every reply read through a BoundedStream (module docstring)."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` asking for no compression; the reply's stream bounded. Raises
        ReplyTooLarge at once for an encoding other than gzip or deflate."""
        request.headers["Accept-Encoding"] = "identity"
        response = await super().handle_async_request(request)
        target = _off_host(request, response)
        if target is not None:
            await response.aclose()
            raise OffHostRedirect(response.status_code, target, request)
        try:
            return bound_reply(response)
        except ReplyTooLarge:
            await response.aclose()
            raise


class BlockingBoundedTransport(httpx.HTTPTransport):
    """BoundedTransport for a blocking client: the same request header, redirect refusal,
    decoding and bounds (BlockingBoundedStream)."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` asking for no compression; the reply's stream bounded. Raises
        OffHostRedirect, or ReplyTooLarge for an encoding other than gzip or deflate."""
        request.headers["Accept-Encoding"] = "identity"
        response = super().handle_request(request)
        target = _off_host(request, response)
        if target is not None:
            response.close()
            raise OffHostRedirect(response.status_code, target, request)
        wbits = _wbits(response)
        if isinstance(wbits, str):
            response.close()
            raise _refused_encoding(wbits)
        assert isinstance(response.stream, httpx.SyncByteStream)  # the blocking transport's
        response.stream = BlockingBoundedStream(response.stream, wbits)
        return response


async def read_whole(client: httpx.AsyncClient, url: str, timeout_s: float,
                     max_bytes: int) -> bytes | None:
    """The body of a GET of `url`, or None: another status than 200, a transport error, no
    whole answer within `timeout_s` seconds (body included: a server that trickles bytes is
    not waited for), or a body past `max_bytes`, whose rest is not read. For the small routes
    llmtop polls or probes (discovery's signatures, the engine panel's figures). Never
    raises for what the server does."""
    import asyncio

    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("GET", url) as resp:
                if resp.status_code != 200:
                    return None
                body = bytearray()
                async for piece in resp.aiter_bytes():
                    body += piece
                    if len(body) > max_bytes:
                        return None
        return bytes(body)
    except (httpx.HTTPError, TimeoutError):
        return None
