"""The ASGI side of `llmtop watch`'s pass-through (servers/watch/proxy.py): which headers are
passed on (RFC 9110, section 7.6.1: not the hop-by-hop ones, nor those Connection names),
reading a request's body whole or as a stream, noticing a client that left, and the watch's
own short JSON replies (403, 401, 502)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

import aiohttp

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"proxy-authenticate",
                        b"proxy-authorization", b"te", b"trailer", b"transfer-encoding",
                        b"upgrade"})
NOT_FORWARDED = HOP_BY_HOP | {b"host"}
MAX_MEASURED_BODY = 256 << 20  # a generation request read whole: 256 MiB (images included)
TOKEN_HEADER = b"x-llmtop-token"


def forward_headers(raw: list[tuple[bytes, bytes]], *, drop_authorization: bool = False
                    ) -> list[tuple[str, str]]:
    """Request headers to send upstream: all but hop-by-hop ones, those named by
    Connection, Host, and the token's (`drop_authorization`, X-Llmtop-Token)."""
    named = {t.strip().lower() for k, v in raw if k.lower() == b"connection"
             for t in v.split(b",")}
    skip = NOT_FORWARDED | named | {TOKEN_HEADER}
    if drop_authorization:
        skip = skip | {b"authorization"}
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw if k.lower() not in skip]


def response_headers(raw: tuple[tuple[bytes, bytes], ...]) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers for the client: all but hop-by-hop ones and those
    named by Connection (lower-cased names, as ASGI wants)."""
    named = {t.strip().lower() for k, v in raw if k.lower() == b"connection"
             for t in v.split(b",")}
    skip = HOP_BY_HOP | named
    return [(k.lower(), v) for k, v in raw if k.lower() not in skip]


class Answer:
    """The ASGI `send` of one request, setting `answered` once the response's last
    message went out (after that, uvicorn's `receive` says "disconnect" for every request,
    which must not read as a client that left)."""

    def __init__(self, send: Send, answered: asyncio.Event) -> None:
        self._send, self.answered = send, answered

    async def __call__(self, message: Message) -> None:
        await self._send(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.answered.set()


def has_body(headers: list[tuple[bytes, bytes]]) -> bool:
    for key, value in headers:
        name = key.lower()
        if name == b"content-length" and value.strip() not in (b"", b"0"):
            return True
        if name == b"transfer-encoding":
            return True
    return False


class TooLarge(Exception):
    """A generation request's body past MAX_MEASURED_BODY (answered 413)."""


async def whole_body(receive: Receive) -> bytes | None:
    """The request body, or None when the client left first. Raises TooLarge past
    MAX_MEASURED_BODY (no engine takes a generation request that size)."""
    parts, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        part = message.get("body", b"")
        size += len(part)
        if size > MAX_MEASURED_BODY:
            raise TooLarge
        parts.append(part)
        if not message.get("more_body", False):
            return b"".join(parts)


async def streamed_body(receive: Receive, done: asyncio.Event) -> AsyncIterator[bytes]:
    """The request body as it arrives (a blob upload, a model push), then `done` set."""
    try:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise aiohttp.ClientConnectionError("the client left while sending its body")
            part = message.get("body", b"")
            if part:
                yield part
            if not message.get("more_body", False):
                return
    finally:
        done.set()


async def disconnected(receive: Receive, body_done: asyncio.Event) -> None:
    """Returns when the client has gone (read only after the body was read whole)."""
    await body_done.wait()
    while (await receive())["type"] != "http.disconnect":
        pass


async def json_reply(send: Send, status: int, body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(raw)).encode())]})
    await send({"type": "http.response.body", "body": raw, "more_body": False})


__all__ = ["HOP_BY_HOP", "MAX_MEASURED_BODY", "TOKEN_HEADER", "Answer", "Message", "Receive",
           "Scope", "Send", "TooLarge", "disconnected", "forward_headers", "has_body", "json_reply",
           "response_headers", "streamed_body", "whole_body"]
