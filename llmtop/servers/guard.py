"""What llmtop's two local servers (the embedded engine and the relay) accept from the web.

Both are local services that a web page in any browser tab can try to reach. The policy is
Ollama's (server/routes.go `allowedHostsMiddleware`, envconfig `AllowedOrigins`), written
again here:

* **Host.** A request whose `Host` header is not a loopback address, `localhost` or a name
  under `.localhost`, or the address the server was bound to, is refused with 403: that is how
  a DNS-rebinding page (its own name resolving to 127.0.0.1) shows up. A server bound to every
  interface (`0.0.0.0`, `::`) was exposed on purpose and accepts any Host, as Ollama does.
* **Origin.** A request carrying an `Origin` header outside the allow-list is refused with
  403, before any work, whatever its method or content type (a `text/plain` POST needs no
  CORS preflight, so CORS headers alone would not stop it). The allow-list: the loopback
  origins (`http(s)://localhost`, `127.0.0.1`, `[::1]`, any port), the bind address's, and
  the patterns in `$LLMTOP_ORIGINS` (comma-separated, `*` matching any run of characters but
  `/`, as in `OLLAMA_ORIGINS`). Requests without an Origin (curl, llmtop itself) pass.
  Starlette's `CORSMiddleware` answers preflights and adds CORS headers for allowed origins.
* **Size.** A body over `$LLMTOP_MAX_BODY_BYTES` (default 1 MiB) is refused with 413 before
  it is read past the limit; JSON nested deeper than 32 levels, NaN/Infinity (and numbers
  that overflow to them, like 1e400) and text with lone UTF-16 surrogates are refused with
  400 naming where they are.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from llmtop.engines.hosts import is_loopback
from llmtop.engines.http import BadRequest

ORIGINS_ENV = "LLMTOP_ORIGINS"
MAX_BODY_ENV = "LLMTOP_MAX_BODY_BYTES"
# 1 MiB: about 250k tokens of English, more than any context the embedded model holds (32k),
# and the relay's page sends text only (no images).
DEFAULT_MAX_BODY_BYTES = 1 << 20
MAX_JSON_DEPTH = 32  # Ollama's request bodies nest 4 levels (options, messages[i].tool_calls)
LOOPBACK_ORIGIN_HOSTS = ("localhost", "127.0.0.1", "[::1]")
BIND_ALL = ("0.0.0.0", "::", "")


def _origins_of(name: str) -> list[str]:
    """The origins a page served from host `name` can have: http and https, any port."""
    return [f"{scheme}://{name}{port}" for scheme in ("http", "https") for port in ("", ":*")]


LOOPBACK_ORIGINS = tuple(o for name in LOOPBACK_ORIGIN_HOSTS for o in _origins_of(name))


# RFC 9110, 7.2: Host = uri-host [ ":" port ]; a bracketed IPv6 literal or a name without
# the characters that end or qualify one (":", "/", "@", "[", "]", spaces), and 5 digits at most
_HOST = re.compile(r"(\[[0-9a-f:.]+\]|[^\[\]:/@\s]+)(?::(\d{1,5}))?")
_BARE_IPV6 = re.compile(r"[0-9a-f:.]+")


def _host_name(host_header: str) -> str:
    """"Example.COM:8000" → "example.com"; "[::1]:8000" → "::1" (lower case, no port); ""
    for a value that is no host (`127.0.0.1:80@evil.example`, `[::1]evil`,
    `localhost:11435/evil`, a port past 65535), which no policy allows."""
    host = host_header.strip().lower()
    if host.count(":") > 1 and _BARE_IPV6.fullmatch(host):
        return host  # an IPv6 literal without brackets (a bind address is given so)
    found = _HOST.fullmatch(host)
    if found is None or (found.group(2) is not None and int(found.group(2)) > 65535):
        return ""
    name = found.group(1)
    if name.startswith("["):
        return name[1:-1]
    return name.rstrip(".")


@lru_cache(maxsize=256)
def _is_loopback(name: str) -> bool:
    """A host name (no port, IPv6 without brackets) that is this machine (`hosts.is_loopback`).
    Kept per name: a client sends the same Host on every request, and the check parses a URL
    and an IP address (~0.08 ms cold on a small VM, on every request's way in)."""
    return is_loopback(f"http://[{name}]" if ":" in name else f"http://{name}")


def origin_pattern(pattern: str) -> str:
    """An allow-list entry ("http://localhost:*") as a regular expression: `*` matches any
    run of characters except "/", everything else literally, case-insensitively."""
    return "(?i:" + "[^/]*".join(re.escape(part) for part in pattern.split("*")) + ")"


@dataclass(frozen=True, slots=True)
class Guard:
    """One server's policy. bind_host: the address it listens on; origins: allow-list
    patterns (see the module docstring); max_body_bytes: the largest request body."""

    bind_host: str = "127.0.0.1"
    origins: tuple[str, ...] = LOOPBACK_ORIGINS
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES

    @classmethod
    def from_env(cls, bind_host: str, environ: Mapping[str, str] | None = None) -> Guard:
        """The policy for a server bound to `bind_host`, with `$LLMTOP_ORIGINS` and
        `$LLMTOP_MAX_BODY_BYTES` read from `environ` (default: os.environ). Raises ValueError
        naming the variable when the size is not a positive whole number."""
        env = os.environ if environ is None else environ
        bind = _host_name(bind_host) if bind_host not in BIND_ALL else bind_host
        origins = list(LOOPBACK_ORIGINS)
        if bind not in BIND_ALL and not _is_loopback(bind):
            origins += _origins_of(f"[{bind}]" if ":" in bind else bind)
        origins += [o.strip() for o in env.get(ORIGINS_ENV, "").split(",") if o.strip()]
        size_text = env.get(MAX_BODY_ENV, "").strip()
        if size_text and not (size_text.isdigit() and int(size_text) > 0):
            raise ValueError(f"{MAX_BODY_ENV}={size_text!r} is not a positive number of bytes")
        size = int(size_text) if size_text else DEFAULT_MAX_BODY_BYTES
        return cls(bind, tuple(origins), size)

    @property
    def origin_regex(self) -> str:
        """One regular expression matching exactly the allowed origins (for CORSMiddleware)."""
        return "|".join(origin_pattern(o) for o in self.origins)

    def host_allowed(self, host_header: str | None) -> bool:
        """Whether a request with this `Host` header may be served (absent: yes, HTTP/1.0)."""
        if not host_header or self.bind_host in BIND_ALL:
            return True
        name = _host_name(host_header)
        return _is_loopback(name) or name == self.bind_host

    def origin_allowed(self, origin: str) -> bool:
        """Whether a request carrying this `Origin` header may be served."""
        return re.fullmatch(self.origin_regex, origin.strip()) is not None


def _forbidden(message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=403)


class LocalOnly:
    """ASGI middleware applying a Guard's Host and Origin rules (403 `{"error"}` otherwise),
    in front of Starlette's CORSMiddleware for the allowed origins."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.guard = guard
        self.app = CORSMiddleware(app, allow_origin_regex=guard.origin_regex,
                                  allow_methods=["GET", "POST", "HEAD", "OPTIONS"],
                                  allow_headers=["Content-Type", "Authorization"])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host, origin = headers.get("host"), headers.get("origin")
        if not self.guard.host_allowed(host):
            await _forbidden(
                f"Host {host!r} is not allowed: this server answers only to loopback names "
                f"and {self.guard.bind_host} (a DNS-rebinding page would use its own name)"
            )(scope, receive, send)
            return
        if origin is not None and not self.guard.origin_allowed(origin):
            await _forbidden(
                f"origin {origin!r} is not allowed; to allow a page, add its origin to "
                f"${ORIGINS_ENV} (comma-separated, * as a wildcard) and restart the server"
            )(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, or BadRequest(413) as soon as it is known to exceed `limit` bytes
    (from Content-Length, else while reading: never more than limit + one chunk is kept)."""
    too_big = BadRequest(f"request body too large: the limit is {limit} bytes "
                         f"(${MAX_BODY_ENV} to change it)", status=413)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_big
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise too_big
        parts.append(part)
    return b"".join(parts)


def _no_constant(name: str) -> Any:
    raise BadRequest(f"{name} is not valid JSON (use a finite number)")


def parse_json(raw: bytes) -> Any:
    """Bytes → a JSON value, refusing what Python's json module would let through and
    llmtop cannot use: NaN/Infinity, numbers that overflow to infinity, nesting deeper than
    MAX_JSON_DEPTH, lone surrogates. Raises BadRequest (400) naming the problem."""
    if not raw.strip():
        raise BadRequest("missing request body")
    try:
        text = raw.decode("utf-8")  # JSON between systems is UTF-8 (RFC 8259, section 8.1)
    except UnicodeDecodeError as exc:
        raise BadRequest(f"request body is not UTF-8 text: {exc}") from exc
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise BadRequest(f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise BadRequest(f"invalid JSON in request body (it is not JSON: {exc})") from exc
    check_values(value)
    return value


def check_values(value: Any) -> None:
    """Walk a parsed JSON value (without recursion): BadRequest for depth > MAX_JSON_DEPTH,
    a non-finite number or a string (value or key) that is not valid Unicode, naming its
    path (`messages[0].content`)."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, path, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise BadRequest(f"JSON nested deeper than {MAX_JSON_DEPTH} levels (at {path})")
        if isinstance(item, float) and not math.isfinite(item):
            raise BadRequest(f"{path or 'the body'} is not a finite number")
        elif isinstance(item, str):
            _check_text(item, path)
        elif isinstance(item, dict):
            for key, sub in item.items():
                _check_text(key, f"a key in {path or 'the body'}")
                stack.append((sub, f"{path}.{key}" if path else key, depth + 1))
        elif isinstance(item, list):
            stack.extend((sub, f"{path}[{i}]", depth + 1) for i, sub in enumerate(item))


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = ascii(text[exc.start:exc.end])
        raise BadRequest(f"{where or 'the body'} has a lone surrogate ({bad}): text must be "
                         "valid Unicode") from None


def type_name(value: Any) -> str:
    """JSON's name for a parsed value's type ("a number", "an object", ...), for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def wrong_type(field: str, expected: str, value: Any) -> BadRequest:
    """The BadRequest for a field of the wrong type: "model must be a string, got 42 (a
    number)". The value is shown with ascii() and cut to 40 characters."""
    shown = ascii(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return BadRequest(f"{field} must be {expected}, got {shown} ({type_name(value)})")


__all__ = ["Guard", "LocalOnly", "check_values", "parse_json", "read_body", "type_name",
           "wrong_type"]
