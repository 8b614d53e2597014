"""Which application opened a TCP connection to a local server: `llmtop watch` names the
caller of each request it forwards ("Open WebUI", "VS Code", "python3 my_script.py").

A local client's connection is a socket on this machine whose local address is the client's
(host, port) and whose remote address is the server's listening one. `psutil.net_connections`
lists every TCP socket with its owning pid (on Linux it reads /proc/net/tcp and each
process's fd links: milliseconds, and only the current user's processes unless privileged);
the pid is then named with the probes' app catalogue (`processes.identify`, so a Chromium
helper is "Chromium" and a Python script is its program). A connection from another machine,
or one whose owner cannot be read, has no caller (None), never a guess.

The lookup is not cheap — psutil reads every process's fd links: 40 ms and 14 ms of CPU
with 250 sockets on a 2-core VM, in Python code that holds the GIL between its reads — so
it runs in a worker *process* (`CallerCache(executor=...)`, a one-worker
ProcessPoolExecutor from `llmtop watch`): a thread would take the GIL from the event loop
that stamps and forwards the chunks. The proxy never waits for it, and it runs once per
client connection: keep-alive requests on the same connection reuse the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import threading
from collections import OrderedDict
from concurrent.futures import Executor
from dataclasses import dataclass

import psutil

from llmtop.probes.processes import identify

CACHE_CONNECTIONS = 256  # client connections remembered (a keep-alive pool is a few)
WARM_UP_WAIT_S = 10.0  # at start-up, how long the watch waits for its lookup worker to start


@dataclass(frozen=True, slots=True)
class Caller:
    """The process behind a client connection: its app's name (the catalogue's, or the
    program's), its category (catalogue.Category value) and pid."""

    app: str
    category: str
    pid: int


def owner_pid(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The pid of the process holding the socket `client` → `server` ((host, port) each), or
    None when it is not on this machine, not visible to this user, or gone. Never raises."""
    host, port = client
    try:
        if not ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:  # not an address (a Unix socket's peer)
        return None
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    for conn in connections:
        if (conn.laddr and conn.raddr and conn.laddr[1] == port and conn.raddr[1] == server[1]
                and conn.pid):
            return int(conn.pid)
    return None


def name_pid(pid: int) -> Caller | None:
    """The app a pid belongs to (`processes.identify`), None when it is gone or unreadable."""
    try:
        proc = psutil.Process(pid)
        name = proc.name()
        who = identify(proc, name)
    except (psutil.Error, OSError):
        return None
    return Caller(who.app, str(who.category), pid)


def find_caller(client: tuple[str, int], server: tuple[str, int]) -> Caller | None:
    """The caller of a connection (`owner_pid`, then `name_pid`); None when unknown."""
    pid = owner_pid(client, server)
    return None if pid is None else name_pid(pid)


class CallerCache:
    """`find_caller` once per client connection (client (host, port) → Caller or None), the
    oldest CACHE_CONNECTIONS forgotten first. executor: where `find` runs the lookup (None:
    the event loop's default thread pool; `llmtop watch` gives a process pool)."""

    def __init__(self, executor: Executor | None = None) -> None:
        self._known: OrderedDict[tuple[str, int], Caller | None] = OrderedDict()
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, int], asyncio.Future[Caller | None]] = {}
        self.executor = executor

    def warm_up(self, wait_s: float = WARM_UP_WAIT_S) -> None:
        """Load this module in the executor's worker now (a lookup of an address that is
        not this machine's: TEST-NET-1, RFC 5737) and wait for it, at most `wait_s`, so the
        first request's lookup is fast: a worker still starting when the first request ends
        left that request unnamed (a finished request waits only briefly for its name)."""
        if self.executor is not None:
            job = self.executor.submit(owner_pid, ("192.0.2.1", 1), ("192.0.2.1", 1))
            with contextlib.suppress(Exception):  # a slow or broken worker: names come later
                job.result(timeout=wait_s)

    async def find(self, client: tuple[str, int], server: tuple[str, int]) -> Caller | None:
        """The cached answer for `client`, else a lookup in the executor (non-blocking);
        requests on one connection that arrive together share one lookup."""
        with self._lock:
            if client in self._known:
                return self._known[client]
        pending = self._pending.get(client)
        if pending is None:
            loop = asyncio.get_running_loop()
            pending = loop.run_in_executor(self.executor, find_caller, client, server)
            self._pending[client] = pending
        try:
            found = await asyncio.shield(pending)
        finally:
            if pending.done():
                self._pending.pop(client, None)
        self.remember(client, found)
        return found

    def lookup(self, client: tuple[str, int], server: tuple[str, int]) -> Caller | None:
        """`find` blocking, in the calling thread (tests, tools)."""
        with self._lock:
            if client in self._known:
                return self._known[client]
        found = find_caller(client, server)
        self.remember(client, found)
        return found

    def remember(self, client: tuple[str, int], found: Caller | None) -> None:
        """Keep `found` as `client`'s caller."""
        with self._lock:
            self._known[client] = found
            while len(self._known) > CACHE_CONNECTIONS:
                self._known.popitem(last=False)
