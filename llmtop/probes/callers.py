"""Which application opened a TCP connection to a local server: `llmtop watch` names the
caller of each request it forwards ("Open WebUI", "VS Code", "python3 my_script.py").

A local client's connection is a socket on this machine whose local address is the client's
(host, port) and whose remote address is the server's listening one. `psutil.net_connections`
lists every TCP socket with its owning pid (on Linux it reads /proc/net/tcp and each
process's fd links: milliseconds, and only the current user's processes unless privileged);
the pid is then named with the probes' app catalogue (`processes.identify`, so a Chromium
helper is "Chromium" and a Python script is its program). A connection from another machine,
or one whose owner cannot be read, has no caller (None), never a guess.

The lookup runs in a worker thread (the proxy never waits for it on a request's path), once
per client connection: keep-alive requests on the same connection reuse the answer
(`CallerCache`).
"""

from __future__ import annotations

import ipaddress
import threading
from collections import OrderedDict
from dataclasses import dataclass

import psutil

from llmtop.probes.processes import identify

CACHE_CONNECTIONS = 256  # client connections remembered (a keep-alive pool is a few)


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
    oldest CACHE_CONNECTIONS forgotten first; thread-safe (lookups run in worker threads)."""

    def __init__(self) -> None:
        self._known: OrderedDict[tuple[str, int], Caller | None] = OrderedDict()
        self._lock = threading.Lock()

    def lookup(self, client: tuple[str, int], server: tuple[str, int]) -> Caller | None:
        """The cached answer for `client`, else a fresh lookup (blocking: call it in a
        thread)."""
        with self._lock:
            if client in self._known:
                return self._known[client]
        found = find_caller(client, server)
        with self._lock:
            self._known[client] = found
            while len(self._known) > CACHE_CONNECTIONS:
                self._known.popitem(last=False)
        return found
