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

Past a bound the stream raises `ReplyTooLarge` (an httpx.ReadError, so any caller that
handles a broken stream handles it); the engines name it as a FailureKind.LIMIT
(engines/http.py, `failure_for_transport`). The rows are in docs/hostile-input.md,
"Unbounded input from an upstream".
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator

import httpx

MAX_LINE_BYTES = 16 * 1024 * 1024  # as the session log's reader (records/log.py)
MAX_DECODED_BYTES = 64 * 1024 * 1024
INFLATE_PIECE_BYTES = 64 * 1024
_ZLIB_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS,
               "deflate": 32 + zlib.MAX_WBITS}  # 32+: a zlib or gzip header, detected


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


class BoundedStream(httpx.AsyncByteStream):
    """`raw`'s bytes (decoded with `wbits` when given: a zlib/gzip stream), raising
    ReplyTooLarge past MAX_DECODED_BYTES decoded or a line past MAX_LINE_BYTES."""

    def __init__(self, raw: httpx.AsyncByteStream, wbits: int | None,
                 max_line: int = MAX_LINE_BYTES, max_decoded: int = MAX_DECODED_BYTES) -> None:
        self._raw = raw
        self._inflate = zlib.decompressobj(wbits) if wbits is not None else None
        self._max_line = max_line
        self._max_decoded = max_decoded

    def _pieces(self, block: bytes) -> list[bytes]:
        if self._inflate is None:
            return [block]
        pieces = [self._inflate.decompress(block, INFLATE_PIECE_BYTES)]
        while self._inflate.unconsumed_tail:
            pieces.append(self._inflate.decompress(self._inflate.unconsumed_tail,
                                                   INFLATE_PIECE_BYTES))
            if len(pieces) * INFLATE_PIECE_BYTES > self._max_decoded:
                break  # the count below raises
        return pieces

    async def __aiter__(self) -> AsyncIterator[bytes]:
        decoded = 0
        line = 0  # bytes since the last newline
        try:
            async for block in self._raw:
                for piece in self._pieces(block):
                    if self._inflate is not None:
                        decoded += len(piece)
                        if decoded > self._max_decoded:
                            raise ReplyTooLarge(
                                f"a compressed reply that inflates past "
                                f"{self._max_decoded // 2**20} MiB")
                    end = piece.rfind(b"\n")
                    line = line + len(piece) if end < 0 else len(piece) - end - 1
                    if line > self._max_line:
                        raise ReplyTooLarge(
                            f"a line longer than {self._max_line // 2**20} MiB")
                    yield piece
        except zlib.error as exc:
            raise ReplyTooLarge(f"a compressed reply that does not decompress ({exc})") from exc

    async def aclose(self) -> None:
        """Close the raw stream (the connection goes back to the pool or is closed)."""
        await self._raw.aclose()


class BoundedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport with every reply read through a BoundedStream (module docstring)."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` asking for no compression; the reply's stream bounded. Raises
        ReplyTooLarge at once for an encoding other than gzip or deflate."""
        request.headers["Accept-Encoding"] = "identity"
        response = await super().handle_async_request(request)
        location = response.headers.get("location")
        if 300 <= response.status_code < 400 and location:
            target = request.url.join(location)
            if (target.scheme, target.host, target.port) != (
                    request.url.scheme, request.url.host, request.url.port):
                await response.aclose()
                raise OffHostRedirect(response.status_code, str(target), request)
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        wbits = None
        if encoding not in ("", "identity"):
            wbits = _ZLIB_WBITS.get(encoding)
            if wbits is None:
                await response.aclose()
                raise ReplyTooLarge(f"a reply in the {encoding!r} encoding, which llmtop "
                                    "did not ask for and does not decode")
            del response.headers["content-encoding"]
        assert isinstance(response.stream, httpx.AsyncByteStream)  # the async transport's
        response.stream = BoundedStream(response.stream, wbits)
        return response
