"""The send stamp (when a request's body has been written to the socket) and connection reuse.

TTFT runs from the send stamp to the first chunk with text (docs/method.md, "TTFT and E2E").
Taking that stamp before the client library builds the request puts the client's own work —
building the request object, serialising it, opening a connection when none is pooled — inside
TTFT (about 1 ms with the `ollama` client and httpx; measured by bench/clock_truth.py,
docs/performance.md). The stamp is therefore taken by httpcore's trace event
`http11.send_request_body.complete`, the moment the last byte of the request has been
handed to the socket, and the time before it is kept as its own figure (`SendStamp.prep_ns`,
logged as `client_prep_ms`).

How the stamp travels: the measuring code opens a `SendStamp` with `stamping()` (a context
variable, so the engine's stream, iterated in the same task, sees it) and every HTTP client
that takes part installs `stamp_hook` as an httpx `request` event hook, which adds the trace
callback to each request's extensions. An engine without the hook leaves `sent_ns` unset and
the measuring code keeps the stamp it took before the request (the earlier definition).

The stamping streams (`arrivals.measured_transport`) make both stamps exact to a few µs: each
write notes the moment just before its send (`note_written`), which the trace then takes, and
a chunk is stamped with the arrival of the bytes that completed it, not with the moment its
parsing ended: each block's arrival (the kernel's receive stamp on plain TCP on Linux,
stamping/rxstamps.py; elsewhere the event loop's `data_received`) is noted in the open
SendStamp (`note_arrival`), and an engine that has parsed a chunk and found text in it takes
`arrival_ns()`. Without such a transport, `arrival_ns()` is the time of the call, the earlier
definition.

A send at a set moment (an open loop's timetable): `released_at(t_ns)` marks the requests made
inside it, and a stamping stream holds such a request's first write until `t_ns`
(`hold`), so the caller can start it early and everything before the socket — building the
request, the pool, a connect — is done by then; the lag that is left is the wake-up's and the
write's (docs/performance.md, "Send lag"). The hold is kept (`SendStamp.held_ns`) and is not
counted as the client's preparation. The stamping streams send such a request's head and body
in one send (`HeadJoin`): the hold is on that send, so the whole request leaves at `t_ns`.

Connection reuse: a stream closed at its `done` chunk before the response's end was read
cannot go back to httpx's pool, and the next request reconnects inside its TTFT (~1.4 ms on
loopback). Every engine therefore `drain`s its stream after the done chunk (normally only the
chunked terminator, already on its way) before handing the done event on; a load sweep
would otherwise pay a new TCP connection per request too. Some servers close the connection
after every streamed response anyway (llama-server does, while its headers say keep-alive):
the trace notes each TCP connect httpcore makes for the open request (`SendStamp.connected`),
and the session log says so per request (`new_connection`). The connect happens before the
body is written, so it lands in `prep_ns`, not in TTFT; with an engine that takes no socket
stamp, it is inside TTFT.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from time import perf_counter_ns, sleep
from typing import Any

import httpx

BODY_WRITTEN = "http11.send_request_body.complete"  # httpcore's trace event name
CONNECTING = "connection.connect_tcp.started"  # a new TCP connection (none pooled to reuse)
DRAIN_TIMEOUT_S = 0.05  # the body's end follows the done line at once on a sane server
# asyncio's epoll selector rounds a timer's timeout up to whole milliseconds
# (selectors.EpollSelector.select: math.ceil(timeout * 1e3)), so a wait timed by asyncio.sleep
# alone ends 0–1 ms late; `sleep_until` wakes this much early and sleeps the rest (under 1 ms)
# in the loop's own thread, where nanosleep keeps ~0.1 ms.
TIMER_EARLY_NS = 1_000_000
# The last stretch of a wait woken earlier than TIMER_EARLY_NS (a replay's sends: `released_at`'s
# early_ns) is spun, not slept: a thread woken from a sleep waits for a CPU again, and on a
# machine whose cores the engine keeps busy that wait was measured at milliseconds, while a
# spinning thread is already on one. Spinning costs its CPU, so only that stretch spins.
SPIN_NS = 300_000


@dataclass(slots=True)
class SendStamp:
    """One request's send stamps, perf_counter_ns.

    prepare_ns: when the caller asked for the request (before the client library built it).
    sent_ns: when httpcore had written the request body to the socket; None until then, and
        for engines that do not install `stamp_hook`.
    received_ns: when the block of bytes read last for this request reached the machine (the
        kernel's receive stamp, stamping/rxstamps.py, or the event loop's `data_received`,
        stamping/arrivals.py); None without a stamping stream.
    written_ns: just before the stream's last write for this request went to the socket; the
        body-written trace takes it as `sent_ns` (the trace runs after httpcore's bookkeeping,
        and on loopback the woken server may run first); None without a stamping stream.
    connected: httpcore opened a new TCP connection for this request (none could be reused).
    release_ns: the moment its first write may go (`released_at`); None: at once.
    release_early_ns: how long before `release_ns` the hold leaves asyncio's timer for the
        loop's own thread (`sleep_until`).
    held_ns: how long its first write was held for `release_ns` (ns); None when it was not
        (no release set, or no stamping stream wrote it).
    """

    prepare_ns: int
    sent_ns: int | None = None
    received_ns: int | None = None
    written_ns: int | None = None
    connected: bool = False
    release_ns: int | None = None
    held_ns: int | None = None
    release_early_ns: int = TIMER_EARLY_NS

    @property
    def prep_ns(self) -> int | None:
        """The client's own time before the request left (ns): build, connect, write; a hold
        for `release_ns` is not counted."""
        if self.sent_ns is None:
            return None
        return self.sent_ns - self.prepare_ns - (self.held_ns or 0)

    @property
    def send_ns(self) -> int:
        """The stamp TTFT starts from: the socket stamp when there is one, else prepare_ns."""
        return self.prepare_ns if self.sent_ns is None else self.sent_ns


_CURRENT: contextvars.ContextVar[SendStamp | None] = contextvars.ContextVar(
    "llmtop_send_stamp", default=None
)
_RELEASE: contextvars.ContextVar[tuple[int | None, int]] = contextvars.ContextVar(
    "llmtop_send_release", default=(None, TIMER_EARLY_NS)
)


@contextmanager
def released_at(t_ns: int | None, early_ns: int = TIMER_EARLY_NS) -> Iterator[None]:
    """Requests stamped inside this block (in this task) leave at `t_ns` (perf_counter_ns),
    not before: their first write is held until then (`hold`, waking `early_ns` before it:
    `sleep_until`). None: no hold."""
    token = _RELEASE.set((t_ns, early_ns))
    try:
        yield
    finally:
        _RELEASE.reset(token)


async def sleep_until(t_ns: int, early_ns: int = TIMER_EARLY_NS) -> None:
    """Return at `t_ns` (perf_counter_ns) or just after it: asyncio's timer until `early_ns`
    before (at least TIMER_EARLY_NS: the timer is 0-1 ms late), then a blocking sleep of the
    rest in this thread; woken earlier than TIMER_EARLY_NS, the last SPIN_NS are spun."""
    early_ns = max(early_ns, TIMER_EARLY_NS)
    wait_ns = t_ns - perf_counter_ns()
    if wait_ns > early_ns:
        await asyncio.sleep((wait_ns - early_ns) / 1e9)
    spin_ns = SPIN_NS if early_ns > TIMER_EARLY_NS else 0
    rest_ns = t_ns - spin_ns - perf_counter_ns()
    if rest_ns > 0:  # bytes arriving meanwhile keep their kernel receive stamps
        sleep(rest_ns / 1e9)  # noqa: ASYNC251 (the loop's other work waits ≤ early_ns)
    while perf_counter_ns() < t_ns:  # the spun stretch (none by default)
        pass


async def hold() -> None:
    """Called by a stamping stream before it writes: the open request's first write waits
    for its `release_ns` (sets `held_ns`); any other write, or a request without a release,
    goes at once."""
    stamp = _CURRENT.get()
    if stamp is None or stamp.release_ns is None or stamp.held_ns is not None:
        return
    t_ns = perf_counter_ns()
    await sleep_until(stamp.release_ns, stamp.release_early_ns)
    stamp.held_ns = perf_counter_ns() - t_ns


@contextmanager
def stamping(prepare_ns: int | None = None) -> Iterator[SendStamp]:
    """Open a SendStamp for the request about to be made in this task (`prepare_ns`:
    perf_counter_ns when it was asked for; default now)."""
    release_ns, early_ns = _RELEASE.get()
    stamp = SendStamp(perf_counter_ns() if prepare_ns is None else prepare_ns,
                      release_ns=release_ns, release_early_ns=early_ns)
    token = _CURRENT.set(stamp)
    try:
        yield stamp
    finally:
        _CURRENT.reset(token)


async def _trace(name: str, _info: dict[str, Any]) -> None:
    if name == CONNECTING:
        stamp = _CURRENT.get()
        if stamp is not None and stamp.sent_ns is None:
            stamp.connected = True
    elif name == BODY_WRITTEN:
        stamp = _CURRENT.get()
        if stamp is not None and stamp.sent_ns is None:
            stamp.sent_ns = stamp.written_ns or perf_counter_ns()


def announces_body(buffer: bytes) -> bool:
    """True when `buffer` is a whole HTTP/1.1 request head (request line, headers, the blank
    line) with a Content-Length above 0: httpcore writes such a head and its body as two
    writes, the body next."""
    if not buffer.endswith(b"\r\n\r\n") or not buffer[:16].isascii():
        return False
    lines = bytes(buffer).split(b"\r\n")
    if not lines[0].endswith((b" HTTP/1.1", b" HTTP/1.0")):
        return False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return value.strip().isdigit() and int(value) > 0
    return False


class HeadJoin:
    """Keeps a timed request's head until its body is written, so that both go to the socket
    in one send at the request's moment (`released_at`). Sent apart, the head wakes the server
    on loopback, which may take this CPU before the body is sent: a timed send was measured
    leaving 1-5 ms late that way on 2 cores shared with the engine, its head on time.

    Only a timed request is joined. Any other goes as httpx sends it, head then body, as the
    user's own httpx-based clients send theirs: there the head wakes the server while the body
    follows, which hides the server's wake-up from the TTFT (joined, the relay's added TTFT
    went from 0.7-1.0 to 1.5 ms, bench/relay_overhead.py, alternated). A head without a
    body (Content-Length absent or 0, chunked) goes alone. One per connection."""

    __slots__ = ("_head",)

    def __init__(self) -> None:
        self._head = b""

    def take(self, buffer: bytes) -> bytes:
        """The bytes to send for a write of `buffer`: b"" for a head kept for its body; the
        kept head and `buffer` for the write after it; else `buffer`."""
        if not self._head and _timed() and announces_body(buffer):
            self._head = bytes(buffer)
            return b""
        head, self._head = self._head, b""
        return head + bytes(buffer) if head else buffer

    def flush(self) -> bytes:
        """The kept head, if any (b"" when none), which is no longer kept: a read or a close
        before its body was written."""
        head, self._head = self._head, b""
        return head


def _timed() -> bool:
    """True while the open request waits for its moment (`released_at`, not yet held)."""
    stamp = _CURRENT.get()
    return stamp is not None and stamp.release_ns is not None and stamp.held_ns is None


def note_written(t_ns: int) -> None:
    """Record that a write for the open request went to the socket at `t_ns` (perf_counter_ns,
    taken just before the send that completed it); nothing when no request is open."""
    stamp = _CURRENT.get()
    if stamp is not None and stamp.sent_ns is None:
        stamp.written_ns = t_ns


def note_arrival(t_ns: int) -> None:
    """Record that the bytes just read for the open request reached llmtop at `t_ns`
    (perf_counter_ns); nothing when no request is open (metadata calls)."""
    stamp = _CURRENT.get()
    if stamp is not None:
        stamp.received_ns = t_ns


def arrival_ns() -> int:
    """The stamp of a chunk just parsed (perf_counter_ns): when the bytes that completed it
    reached llmtop — the last block read for the open request (httpcore reads only when the
    parser needs more, so no later block has been read) — else, without arrival stamps, now."""
    stamp = _CURRENT.get()
    if stamp is not None and stamp.received_ns is not None:
        return stamp.received_ns
    return perf_counter_ns()


async def stamp_hook(request: httpx.Request) -> None:
    """httpx `request` event hook: trace this request's body write into the open SendStamp.
    A request that already carries its own trace callback is left alone."""
    request.extensions.setdefault("trace", _trace)


def stamp_hooks() -> dict[str, list[Any]]:
    """The `event_hooks` argument for an httpx.AsyncClient whose requests are measured."""
    return {"request": [stamp_hook]}


async def drain(items: AsyncIterator[Any]) -> None:
    """Pull `items` to their end (what follows a done chunk) so the response is read whole and
    its connection returns to the pool; give up after DRAIN_TIMEOUT_S, when the connection is
    simply closed. Errors here are not the request's: ignored."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(DRAIN_TIMEOUT_S):
            async for _ in items:
                pass
