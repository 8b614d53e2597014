"""HTTP/1.x as `llmtop watch` writes it (pure, no I/O): the request head it sends the engine,
the body's framing, and the watch's own short JSON replies (403, 401, 413, 502, 400).

The watch pairs each client connection with one connection to the engine
(servers/watch/connection.py), so the connection-level headers a client sends (Connection,
Keep-Alive, TE, Upgrade) mean the same on the engine's side and pass as sent. What changes:
* `Host` becomes the engine's own (Ollama refuses a foreign Host);
* the watch's token (`X-Llmtop-Token`, or `Authorization` when it carried the token) and the
  headers addressed to a proxy (`Proxy-Authorization`, `Proxy-Connection`) stop here;
* the body's framing is always the watch's own, written from what its parser read, never
  the client's headers passed on: a measured request's body, read whole, goes with a
  `Content-Length` and without `Expect: 100-continue`, which the watch answers itself (curl
  asks it for large bodies and waits for it); any other body goes as it arrives, under the
  `Content-Length` the parser checked or re-chunked under one `Transfer-Encoding: chunked`.
  An engine therefore reads exactly the requests the watch read: a body whose framing two
  parsers could read two ways (two `Transfer-Encoding` headers, a coding other than
  `chunked`) is refused with 400 before a byte of it is sent, since the part one parser
  takes for a body the other may take for a second request (request smuggling, RFC 9112,
  section 6.3 and 11.2);
* no protocol switch passes: `Upgrade`, `HTTP2-Settings` and their Connection tokens are
  left out, so the engine answers in HTTP/1.1 (RFC 9110, section 7.8, lets a server ignore
  Upgrade; `curl --http2` on http:// then goes on in HTTP/1.1) and every request on the
  connection stays one the watch checks and measures.
The response is never rebuilt: its bytes go back as they came (connection.py).
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

TOKEN_HEADER = b"x-llmtop-token"
PROXY_ONLY = frozenset({b"proxy-authorization", b"proxy-connection"})
UPGRADING = frozenset({b"upgrade", b"http2-settings"})
FRAMING = frozenset({b"content-length", b"transfer-encoding"})
REFRAMED = FRAMING | {b"expect"}
MAX_MEASURED_BODY = 256 << 20  # a generation request read whole: 256 MiB (images included)
MAX_HEAD_BYTES = 1 << 20  # a request line and headers past 1 MiB: 431 (no client sends that)
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"

REASONS = {400: b"Bad Request", 401: b"Unauthorized", 403: b"Forbidden",
           405: b"Method Not Allowed", 408: b"Request Timeout", 413: b"Content Too Large",
           431: b"Request Header Fields Too Large", 502: b"Bad Gateway",
           505: b"HTTP Version Not Supported"}


class Upstream:
    """Where the engine is, from its base URL ("http://127.0.0.1:11434", "https://h/prefix"):
    `host`, `port`, `tls` (https), `prefix` (a path every target is put under, "" for none),
    `host_header` (the Host value the engine expects). Raises ValueError for another scheme."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"--upstream {url!r}: only http:// and https:// engines")
        self.url = url
        self.tls = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/").encode("latin-1")
        self.host_header = parts.netloc.rpartition("@")[2].encode("latin-1")


def request_head(method: bytes, target: bytes, version: str, headers: list[tuple[bytes, bytes]],
                 upstream: Upstream, *, drop: frozenset[bytes], length: int | None = None,
                 chunked: bool = False, measured: bool = False) -> bytes:
    """The request line and headers to send the engine (module docstring): `target` under
    the upstream's prefix, the client's HTTP version, its headers in their order but Host
    (the engine's own, first), the names in `drop` (lower-case), the proxy-only ones and the
    client's own framing headers, then the watch's framing: `Content-Length: length` when
    `length` is given, else `Transfer-Encoding: chunked` when `chunked`, else none (a
    request without a body). `measured`: the body goes whole, so `Expect` stops here too."""
    skip = drop | PROXY_ONLY | UPGRADING | (REFRAMED if measured else FRAMING) | {b"host"}
    if upstream.prefix and target.startswith(b"/"):
        target = upstream.prefix + target
    lines = [b"%s %s HTTP/%s\r\nHost: %s\r\n" % (method, target, version.encode(),
                                                  upstream.host_header)]
    for k, v in headers:
        name = k.lower()
        if name in skip:
            continue
        if name == b"connection":  # its upgrade tokens go with the headers they name
            kept = [t.strip() for t in v.split(b",") if t.strip().lower() not in UPGRADING]
            if not kept:
                continue
            v = b", ".join(kept)
        lines.append(b"%s: %s\r\n" % (k, v))
    if length is not None:
        lines.append(b"Content-Length: %d\r\n" % length)
    elif chunked:
        lines.append(b"Transfer-Encoding: chunked\r\n")
    lines.append(b"\r\n")
    return b"".join(lines)


def framing_refusal(headers: list[tuple[bytes, bytes]]) -> str | None:
    """Why a request's body framing is not passed on, or None when it is one the watch
    re-frames exactly: no `Transfer-Encoding`, or one header whose only coding is `chunked`.
    RFC 9112, section 6.1: a server that receives a transfer coding it does not understand
    answers 501; and two `Transfer-Encoding` lines are read as one list by some parsers and
    as the first or last line by others, which is how one request hides another."""
    codings = [v for k, v in headers if k.lower() == b"transfer-encoding"]
    if len(codings) > 1:
        return ("more than one Transfer-Encoding header: parsers disagree on where such a "
                "body ends, so it is not passed on; send one `Transfer-Encoding: chunked`")
    if codings and codings[0].strip().lower() != b"chunked":
        shown = codings[0].decode("latin-1")[:60]
        return (f"Transfer-Encoding {shown!r}: only `chunked` is passed on (send the body "
                "uncompressed, or with Content-Length)")
    return None


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body (RFC 9112, section 7.1); b"" is the last chunk."""
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b"0\r\n\r\n"


def json_reply(status: int, body: dict[str, str], *, head_only: bool = False) -> bytes:
    """A whole response of the watch's own: `status`, a JSON body, and `Connection: close`
    (the watch closes the connection after it: a refused request's body is not read).
    head_only: the answer to a HEAD, which has no body (RFC 9110, 9.3.2); its length is
    still said."""
    raw = json.dumps(body).encode()
    return (b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n%s" % (status, REASONS.get(status, b""), len(raw),
                                              b"" if head_only else raw))


def header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The first value of header `name` (lower-case), or None."""
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


__all__ = ["CONTINUE", "MAX_HEAD_BYTES", "MAX_MEASURED_BODY", "TOKEN_HEADER", "Upstream",
           "chunk", "framing_refusal", "header", "json_reply", "request_head"]
