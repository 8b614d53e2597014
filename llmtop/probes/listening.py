"""The TCP sockets this machine listens on, and which of them belong to inference engines.

`llmtop engines` probes the engines' usual ports; an engine started on another port is found
here instead: a socket in LISTEN whose owner the catalogue files under "other inference
engine" (`engine_identity.engine_candidates`: Ollama, llama.cpp, vLLM, LM Studio,
llama-cpp-python, `llmtop engine`). The owner of every other listening socket is kept too,
so an engine found on a usual port can be named with its pid and process.

What the OS shows depends on the user: psutil.net_connections(kind="tcp") gives the owner
of another user's socket as None on Linux unless llmtop runs as root, and raises
AccessDenied for the whole list on macOS without root. Then an engine process whose command
line names its port (`--port N`) stands for its socket, and `ListenScan.note` says what
could not be seen. Never raises.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil

from llmtop.probes.engine_identity import Candidate, engine_candidates

# An address a socket listens on for every interface: reached from here on loopback.
WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


@dataclass(frozen=True, slots=True)
class Listener:
    """One listening socket. address: where to reach it from this machine (loopback for a
    socket bound to every interface); pid/process: its owner where the OS shows it (process:
    the catalogue's name for an engine, "llama.cpp", else the process's own name); engine:
    whether the owner is a known inference engine; how: "listening socket" or "--port on
    its command line" (the socket's owner was not visible)."""

    address: str
    port: int
    pid: int | None = None
    process: str | None = None
    engine: bool = False
    how: str = "listening socket"


@dataclass(frozen=True, slots=True)
class ListenScan:
    """What `scan` found: every listening socket it could read (engines' and others'), and
    a note saying what it could not see and why (None when it saw everything)."""

    listeners: tuple[Listener, ...] = ()
    note: str | None = None

    @property
    def engines(self) -> tuple[Listener, ...]:
        """The sockets of known engine processes."""
        return tuple(entry for entry in self.listeners if entry.engine)


@dataclass(slots=True)
class ScanSources:
    """Where `scan` reads the machine (a test gives fakes). connections: psutil's
    net_connections(kind="tcp")-like, may raise AccessDenied; candidates: the running
    engine processes; name: a pid's process name (raises psutil.Error when gone); root:
    whether llmtop runs as root (then only another namespace hides a socket's owner)."""

    connections: Callable[[], Sequence[Any]] = field(
        default=lambda: psutil.net_connections(kind="tcp"))
    candidates: Callable[[], list[Candidate]] = field(default=engine_candidates)
    name: Callable[[int], str] = field(default=lambda pid: psutil.Process(pid).name())
    root: Callable[[], bool] = field(default=lambda: hasattr(os, "geteuid") and os.geteuid() == 0)


def scan(sources: ScanSources | None = None) -> ListenScan:
    """The listening TCP sockets and their owners (module docstring). Costs one walk of the
    process table and one of the socket table: ~10-50 ms of CPU for a few hundred processes.
    Never raises."""
    src = sources or ScanSources()
    try:
        candidates = src.candidates()
    except Exception:  # noqa: BLE001 - a process table that cannot be read: no engines by name
        candidates = []
    engines = {c.pid: c for c in candidates}
    notes: list[str] = []
    try:
        conns = list(src.connections())
    except (psutil.Error, OSError) as exc:
        conns = []
        notes.append(f"the socket table is not readable by this user ({type(exc).__name__}): "
                     "run as root to see which process listens where")
    seen: dict[tuple[str, int], Listener] = {}
    hidden = 0
    for conn in conns:
        if conn.status != psutil.CONN_LISTEN or not conn.laddr:
            continue
        address = reach(str(conn.laddr.ip))
        if address is None:
            continue
        key = (address, int(conn.laddr.port))
        if key in seen:
            continue
        pid = conn.pid or None
        if pid is None:
            hidden += 1
        seen[key] = _listener(address, key[1], pid, engines, src)
    owned = {entry.pid for entry in seen.values() if entry.pid is not None}
    for cand in candidates:  # an engine whose socket's owner was not shown
        if cand.pid in owned or cand.port is None:
            continue
        if any(entry.port == cand.port and entry.engine for entry in seen.values()):
            continue
        seen[("127.0.0.1", cand.port)] = Listener("127.0.0.1", cand.port, cand.pid, cand.app,
                                                  True, "--port on its command line")
    if hidden:
        notes.append(_hidden_note(hidden, src.root()))
    return ListenScan(tuple(seen.values()), "; ".join(notes) or None)


def _hidden_note(hidden: int, root: bool) -> str:
    """Why `hidden` listening sockets have no owner shown, and what to do: as root the OS
    hides only a process in another PID namespace (a container); otherwise it is another
    user's."""
    what = f"the owner of {hidden} listening socket{'s' if hidden != 1 else ''} is not shown"
    if root:
        return (f"{what} (a process in another PID namespace: a container); the usual ports "
                "are probed anyway")
    return (f"{what} (another user's process): run as root to name it; the usual ports are "
            "probed anyway")


def _listener(address: str, port: int, pid: int | None, engines: dict[int, Candidate],
              src: ScanSources) -> Listener:
    """The Listener for a socket owned by `pid` (None: not visible)."""
    if pid is None:
        return Listener(address, port)
    cand = engines.get(pid)
    if cand is not None:
        return Listener(address, port, pid, cand.app, True)
    name = None
    with contextlib.suppress(psutil.Error, OSError):
        name = src.name(pid)
    return Listener(address, port, pid, name)


def reach(bound: str) -> str | None:
    """The address this machine reaches a socket bound to `bound` on: loopback for a wildcard
    ("0.0.0.0", "::"), the address itself otherwise (a loopback or one of this machine's);
    None for one that is no IP address. A scope suffix ("fe80::1%eth0") is kept."""
    if bound in WILDCARDS:
        return WILDCARDS[bound]
    try:
        ipaddress.ip_address(bound.split("%", 1)[0])
    except ValueError:
        return None
    return bound
