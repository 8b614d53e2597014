"""Which local processes are the measured engine, found without privileges, and how.

On the standard Linux install Ollama runs as a system service under its own user, and a
desktop user cannot see who owns another user's socket (psutil reports `pid=None` on Linux
and raises AccessDenied on macOS). Counting the engine's runner as background load would make
llmtop tell users to stop the engine they are measuring, so `identify_engine` tries, in order:

1. pids given by the user (`--engine-pid`, or `[engine] pids` in the config file);
2. the owner of the socket listening on the engine's port, where the OS shows it (plus the
   one engine family running when that owner is not an engine itself: docker-proxy forwarding
   a published container port);
3. the user that owns that socket (`/proc/net/tcp` and `tcp6` are world-readable on Linux),
   and that user's processes that the catalogue knows as inference engines;
4. the catalogue alone: exactly one engine family (Ollama, llama.cpp, vLLM, LM Studio,
   llama-cpp-python) running on this machine, and the host is this machine.

Every way adds the children of what it found (Ollama's model runners are children of
`ollama serve`). The result says which way worked and why the earlier ones did not
(`EngineIdentity.describe`), and becomes an INFO finding: identification never makes a run
NOISY, and failing to identify says the engine's CPU may be counted as background.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil

from llmtop.probes.catalogue import Category, classify, needs_path
from llmtop.probes.verdict import REMEDY_UNIDENTIFIED, Finding, Level

GIVEN, SOCKET_OWNER, SOCKET_USER, BY_NAME = "given", "socket owner", "socket user", "by name"
HOW_TEXT = {
    GIVEN: "identified by the pids given (--engine-pid / [engine] pids)",
    SOCKET_OWNER: "identified by the owner of the listening socket",
    SOCKET_USER: "identified by the listening socket's user and engine names",
    BY_NAME: "identified by name",
}
TCP_LISTEN = "0A"  # st column of /proc/net/tcp: TCP_LISTEN in include/net/tcp_states.h
PROC_NET = ("/proc/net/tcp", "/proc/net/tcp6")


@dataclass(frozen=True, slots=True)
class EngineIdentity:
    """The measured engine's local processes.

    pids: the engine's pids, children included (empty when not identified or not local).
    how: GIVEN, SOCKET_OWNER, SOCKET_USER, BY_NAME, or "" when not identified.
    notes: why earlier ways failed or what was odd ("socket owner not visible to this user").
    app: the engine's catalogue name ("Ollama") when known. local: False for a remote host.
    """

    host: str
    pids: frozenset[int] = frozenset()
    how: str = ""
    notes: tuple[str, ...] = ()
    app: str | None = None
    local: bool = True

    @property
    def identified(self) -> bool:
        """True when at least one engine pid was found."""
        return bool(self.pids)

    def describe(self) -> str:
        """"engine: pids 900, 901 — identified by name; socket owner not visible to this user"."""
        if not self.local:
            return f"engine: not on this machine ({self.host})"
        if not self.pids:
            head = "engine: not identified"
        else:
            who = f"{self.app} " if self.app else ""
            listing = ", ".join(map(str, sorted(self.pids)))
            head = f"engine: {who}pids {listing} — {HOW_TEXT[self.how]}"
        return "; ".join((head, *self.notes))

    def finding(self) -> Finding:
        """An INFO finding: how the engine was identified, or that its CPU may be counted."""
        if self.pids or not self.local:
            return Finding(
                "engine-identified", Level.INFO, None, None, "", self.describe(), "nothing to do"
            )
        return Finding(
            "engine-unidentified",
            Level.INFO,
            None,
            None,
            "",
            f"{self.describe()}: its CPU may be counted as background load",
            REMEDY_UNIDENTIFIED,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: pids (sorted), how, notes, app, local, and the one-line description."""
        return {
            "pids": sorted(self.pids),
            "how": self.how or None,
            "notes": list(self.notes),
            "app": self.app,
            "local": self.local,
            "description": self.describe(),
        }


@dataclass(frozen=True, slots=True)
class Candidate:
    """A running process the catalogue knows as an inference engine. port: the port its
    command line says it listens on (`--port N`: llama-server, llmtop's own engine; None
    when it names none or is unreadable), so an engine declared on another port is never
    the one answering at the host's."""

    pid: int
    app: str
    uid: int | None
    port: int | None = None


@dataclass(slots=True)
class Sources:
    """Where `identify_engine` reads the machine (tests replace them with fakes).

    connections: psutil.net_connections-like (kind="tcp"); may raise AccessDenied.
    proc_net: /proc/net/tcp-like files to read listening sockets' uids from.
    candidates: the running engine processes (see `engine_candidates`).
    children: pid → its descendants' pids (empty for a vanished pid).
    exists: whether a pid is running.
    """

    connections: Callable[[], Sequence[Any]] = field(
        default=lambda: psutil.net_connections(kind="tcp")
    )
    proc_net: tuple[str, ...] = PROC_NET
    candidates: Callable[[], list[Candidate]] = field(default=lambda: engine_candidates())
    children: Callable[[int], Iterable[int]] = field(default=lambda pid: _descendants(pid))
    exists: Callable[[int], bool] = field(default=psutil.pid_exists)


def identify_engine(
    host: str, override: Collection[int] | None = None, *, sources: Sources | None = None
) -> EngineIdentity:
    """The measured engine's local processes and how they were found (module docstring).

    host: the engine's URL ("http://127.0.0.1:11434"). override: pids named by the user;
    when given, only they (and their children) are used. Never raises.
    """
    src = sources or Sources()
    if override:
        return _given(host, override, src)
    port, local, why = _local_port(host)
    if not local:
        return EngineIdentity(host, local=False, notes=(why,) if why else ())
    notes: list[str] = []
    owners = _socket_owners(port, src, notes) if port is not None else set()
    candidates = [c for c in _safe(src.candidates, [])
                  if port is None or c.port is None or c.port == port]
    if owners:  # the OS says who answers: trust it, even when the catalogue does not know it
        app = _app_of(owners, candidates)
        families = {c.app for c in candidates}
        if app is None and len(families) == 1:
            # A port forwarder (docker-proxy for a published container port, an SSH tunnel)
            # owns the socket; the one engine running is what it forwards to.
            app = families.pop()
            owners |= {c.pid for c in candidates}
            notes.append(f"the socket's owner is not a known engine: {app} added by name")
        return _with_children(host, owners, SOCKET_OWNER, notes, app, src)
    uids = listening_uids(port, src.proc_net) if port is not None else None
    if uids:
        mine = [c for c in candidates if c.uid in uids]
        families = {c.app for c in mine}
        if len(families) == 1:
            return _with_children(
                host, {c.pid for c in mine}, SOCKET_USER, notes, families.pop(), src
            )
        notes.append(_uid_note(uids, families))
    elif uids is not None:
        notes.append(f"no socket listens on port {port} in /proc/net/tcp (another namespace?)")
    return _by_name(host, candidates, notes, src)


def _given(host: str, override: Collection[int], src: Sources) -> EngineIdentity:
    alive = {p for p in override if p > 0 and src.exists(p)}
    notes = [f"pid {p} is not running" for p in sorted(set(override) - alive)]
    return _with_children(host, alive, GIVEN, notes, None, src) if alive else EngineIdentity(
        host, notes=tuple(notes)
    )


def _by_name(
    host: str, candidates: list[Candidate], notes: list[str], src: Sources
) -> EngineIdentity:
    families = sorted({c.app for c in candidates})
    if len(families) == 1:
        pids = {c.pid for c in candidates}
        return _with_children(host, pids, BY_NAME, notes, families[0], src)
    if families:
        notes.append(f"several engines are running ({', '.join(families)}): cannot tell which")
    else:
        notes.append("no known engine process is running")
    return EngineIdentity(host, notes=tuple(notes))


def _with_children(
    host: str, roots: set[int], how: str, notes: list[str], app: str | None, src: Sources
) -> EngineIdentity:
    pids = set(roots)
    for pid in roots:
        with contextlib.suppress(Exception):  # a vanished or unreadable process: no children
            pids.update(src.children(pid))
    return EngineIdentity(host, frozenset(pids), how, tuple(notes), app)


def _socket_owners(port: int, src: Sources, notes: list[str]) -> set[int]:
    try:
        conns = src.connections()
    except (psutil.Error, OSError) as exc:
        notes.append(f"sockets not listable by this user ({type(exc).__name__})")
        return set()
    listening = [
        c for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
    ]
    owners = {c.pid for c in listening if c.pid}
    if listening and not owners:
        notes.append("socket owner not visible to this user")
    return owners


def _app_of(pids: set[int], candidates: list[Candidate]) -> str | None:
    apps = {c.app for c in candidates if c.pid in pids}
    return apps.pop() if len(apps) == 1 else None


def _uid_note(uids: set[int], families: set[str]) -> str:
    who = ", ".join(_user_name(u) for u in sorted(uids))
    if not families:
        return f"the socket's user ({who}) runs no known engine process"
    return f"the socket's user ({who}) runs several engines ({', '.join(sorted(families))})"


def _user_name(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name}, uid {uid}"
    except (ImportError, KeyError):
        return f"uid {uid}"


def is_local_host(host: str) -> bool:
    """True when the engine URL `host` is on this machine (loopback, or one of its addresses);
    False for another machine or a name that does not parse as an address."""
    return _local_port(host)[1]


def _local_port(host: str) -> tuple[int | None, bool, str]:
    """(port, whether host is this machine, why not). An unknown name counts as remote."""
    try:
        parts = urlsplit(host if "://" in host else f"http://{host}")
        port, name = parts.port, parts.hostname or ""
    except ValueError:
        return None, False, f"cannot read the address {host!r}"
    if name in ("localhost", "") or name.endswith(".localhost"):
        return port, True, ""
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return port, False, f"cannot tell whether {name} is this machine (not resolved)"
    if ip.is_loopback or ip.is_unspecified or str(ip) in _local_addresses():
        return port, True, ""
    return port, False, ""


def _local_addresses() -> set[str]:
    try:
        return {a.address.split("%")[0] for ads in psutil.net_if_addrs().values() for a in ads}
    except (psutil.Error, OSError):
        return set()


def parse_proc_net(text: str, port: int) -> set[int]:
    """The uids owning sockets that LISTEN on `port` in one /proc/net/tcp{,6} file.

    Columns (Linux Documentation/networking/proc_net_tcp.rst): sl, local_address as
    HEXIP:HEXPORT, rem_address, st, tx:rx queues, tr:tm->when, retrnsmt, uid, …
    Malformed lines are skipped.
    """
    uids = set()
    for line in text.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 8 or cols[3] != TCP_LISTEN:
            continue
        try:
            if int(cols[1].rsplit(":", 1)[1], 16) == port:
                uids.add(int(cols[7]))
        except (IndexError, ValueError):
            continue
    return uids


def listening_uids(port: int, files: Iterable[str] = PROC_NET) -> set[int] | None:
    """Uids owning a socket listening on `port`, from /proc/net/tcp{,6}; None when no such
    file can be read (not Linux)."""
    uids: set[int] | None = None
    for name in files:
        with contextlib.suppress(OSError):
            text = Path(name).read_text(encoding="ascii", errors="replace")
            uids = (uids or set()) | parse_proc_net(text, port)
    return uids


def engine_candidates() -> list[Candidate]:
    """Running processes the catalogue files under "other inference engine", with their
    effective uid (None when unreadable). Skips pid 0 (the idle task) and vanished processes."""
    out = []
    for proc in psutil.process_iter():
        if proc.pid == 0:
            continue
        with contextlib.suppress(psutil.Error):
            name = proc.name()
            exe = cmdline = None
            if needs_path(name):
                exe = _optional(proc.exe)
                cmdline = _optional(proc.cmdline)
            rule = classify(name, exe, cmdline)
            if rule is not None and rule.category is Category.INFERENCE:
                uids = _optional(proc.uids)
                if cmdline is None:
                    cmdline = _optional(proc.cmdline)
                out.append(Candidate(proc.pid, rule.app, uids.effective if uids else None,
                                     declared_port(cmdline)))
    return out


def declared_port(cmdline: Sequence[str] | None) -> int | None:
    """The port a command line names (`--port N` or `--port=N`), None without one."""
    args = list(cmdline or ())
    for i, arg in enumerate(args):
        value = args[i + 1] if arg == "--port" and i + 1 < len(args) else (
            arg.removeprefix("--port=") if arg.startswith("--port=") else None)
        if value is not None and value.isdigit():
            return int(value)
    return None


def _optional(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except psutil.AccessDenied:
        return None


def _descendants(pid: int) -> list[int]:
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def _safe(fn: Callable[[], Any], default: Any) -> Any:
    try:
        return fn()
    except Exception:  # noqa: BLE001 - identification is best effort and must never raise
        return default
