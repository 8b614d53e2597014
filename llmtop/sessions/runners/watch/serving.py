"""Serving `llmtop watch`'s proxies: which address each upstream gets, one server per
pair (servers/watch/proxy.WatchServer) in one event loop, the worker process that names
callers, and which local processes the probes count as the engine (`UpstreamEngines`) and as
the watch itself (`own_pids`). Shared by the headless command (commands/watch.py) and the
screen (tui/watch.py).

Each `--upstream` gets its own listening address: the i-th `--listen` (default
127.0.0.1:11436), and for upstreams past the last `--listen` the next ports after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import multiprocessing
import os
import socket
import threading
import time
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

import psutil

from llmtop.engines.hosts import parse_address, resolve_host
from llmtop.probes.callers import CallerCache
from llmtop.probes.engine_identity import EngineIdentity, identify_engine
from llmtop.probes.sampler import ProbeSample, ProbeSampler
from llmtop.servers.guard import Guard
from llmtop.servers.watch.proxy import GRACE_S, Watcher, WatchProxy, WatchServer

# Not 11435, `llmtop engine`'s port: a watch and a user's engine started with their
# defaults would take the same port; and not one of the ports `llmtop engines` probes
# (engines/discovery.KNOWN_PORTS), where a watch in front of Ollama would be listed as a
# second Ollama.
DEFAULT_LISTEN = "127.0.0.1:11436"


@dataclass(frozen=True, slots=True)
class Pair:
    """One proxy: where it listens (host, port) and the engine it forwards to (a URL)."""

    host: str
    port: int
    upstream: str

    @property
    def listen(self) -> str:
        """"host:port" ("[::1]:11436" for IPv6)."""
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"{shown}:{self.port}"


def split_listen(text: str) -> tuple[str, int]:
    """"127.0.0.1:11436" / "[::1]:11436" / ":11436" → (host, port); raises ValueError with
    what was wrong."""
    text = text.strip()
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"--listen {text!r} needs HOST:PORT with a port from 1 to 65535 "
                         "(e.g. 127.0.0.1:11436)")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


def pairs_of(listens: Sequence[str], upstreams: Sequence[str]) -> list[Pair]:
    """Pair the listening addresses with the upstreams (module docstring). Raises ValueError
    (a bad --listen, more --listen than --upstream, one port twice) or HostError."""
    urls = [parse_address(u, "--upstream").url for u in upstreams] or [resolve_host(None)]
    spots = [split_listen(t) for t in listens] or [split_listen(DEFAULT_LISTEN)]
    if len(spots) > len(urls):
        raise ValueError(f"{len(spots)} --listen for {len(urls)} --upstream: give one "
                         "--upstream per --listen")
    while len(spots) < len(urls):
        host, port = spots[-1]
        spots.append((host, port + 1))
    ports = [s[1] for s in spots]
    if len(set(ports)) != len(ports):
        raise ValueError(f"--listen ports must differ, got {ports}")
    for url, (host, port) in zip(urls, spots, strict=True):
        if is_own_address(url, host, port):
            raise ValueError(f"--upstream {url} is the watch's own --listen: move the engine "
                             "to another port (docs/guide/watch.md)")
    return [Pair(host, port, url) for url, (host, port) in zip(urls, spots, strict=True)]


def is_own_address(url: str, host: str, port: int) -> bool:
    """True when `url` reaches the watch's own `host`:`port`: the same port at an address that
    is this listener's (the same, by name or number: `localhost` is 127.0.0.1 too) or, for a
    listener on every address (0.0.0.0, ::), any of this machine's. A watch forwarding to
    itself opens connections to itself until it runs out of files; refused at start."""
    parts = urlsplit(url)
    if (parts.port or (443 if parts.scheme == "https" else 80)) != port:
        return False
    try:
        ups = {str(ai[4][0]).split("%")[0]
               for ai in socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)}
        mine = {str(ai[4][0]).split("%")[0]
                for ai in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}
    except OSError:
        return False  # a name that does not resolve is not this machine's
    if any(ipaddress.ip_address(a).is_unspecified for a in mine):
        local = {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values()
                 for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6)}
        return any(ipaddress.ip_address(a).is_loopback or a in local for a in ups)
    return bool(ups & mine)


UPSTREAM_CHECK_S = 0.5  # a TCP connect on this machine or its network takes milliseconds


def silent_upstream(pair: Pair, timeout_s: float = UPSTREAM_CHECK_S) -> str | None:
    """Why nothing answers at `pair`'s upstream now (its TCP connect refused, or not
    accepted within `timeout_s`), as a line for the user; None when something listens
    there. A watch started before its engine serves, but each request meanwhile gets the
    watch's 502, and the probes' engine can be no more than a guess by name."""
    parts = urlsplit(pair.upstream)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", port), timeout_s):
            return None
    except TimeoutError:
        why = f"no answer within {timeout_s:g} s"
    except OSError as exc:
        why = (exc.strerror or type(exc).__name__).lower()
    return (f"nothing answers at {pair.upstream} now ({why}): requests to "
            f"http://{pair.listen} get a 502 until it does; start the engine there, or point "
            "--upstream at one that runs (`llmtop engines` lists them)")


def build_servers(pairs: Sequence[Pair], session: Watcher, token: str | None,
                  callers: CallerCache | None) -> list[WatchServer]:
    """One server per pair, each serving a WatchProxy that reports to `session` and names
    callers with `callers`. The watch adds no header of its own (the upstream's Server and
    Date pass through)."""
    return [WatchServer(WatchProxy(p.upstream, (p.host, p.port), session,
                                   guard=Guard.from_env(p.host), token=token, callers=callers),
                        GRACE_S)
            for p in pairs]


async def run_servers(servers: Sequence[WatchServer]) -> None:
    """Serve them all until one stops (a signal sets every `should_exit`). Raises OSError
    when an address cannot be bound (the others are stopped first)."""
    tasks = [asyncio.ensure_future(s.serve()) for s in servers]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for s in servers:
            s.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


@contextlib.contextmanager
def caller_pool() -> Generator[ProcessPoolExecutor, None, None]:
    """The one worker process that names callers (probes/callers.py says why a process),
    started by "spawn" (a fork of a threaded process is unsafe), shut down after: waiting for
    the worker (a lookup takes tens of ms), since a pool left running at the interpreter's exit
    printed CPython's "Exception ignored ... Bad file descriptor" traceback on 1 Ctrl+C of 8."""
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# How often the watch looks again for the processes behind its upstreams: an engine started,
# stopped or restarted after the watch is found within this many seconds (a pid that ended
# makes it look at the next sample). Each look lists the machine's sockets and processes:
# tens of ms, once per RECHECK_S on the probes' thread.
RECHECK_S = 10.0

# What a remedy tells the user to do to give the engine N threads, by the catalogue's name
# for it: the watch sends no request of its own, so llmtop's `--num-thread` is no remedy
# there, and the OpenAI API has no thread-count field (llama-server's are its --threads).
THREAD_SETTINGS = {
    "Ollama": "num_thread {n} in the apps' request options (or `PARAMETER num_thread {n}` in "
              "the model's Modelfile)",
    "llmtop engine": "num_thread {n} in the apps' request options",
    "llama.cpp": "restarting llama-server with --threads {n}",
    "llama-cpp-python": "restarting llama_cpp.server with --n_threads {n}",
    "LM Studio": "setting the model's CPU thread count to {n} in LM Studio",
}
THREAD_SETTING_UNKNOWN = "giving the engine {n} threads in its own settings"


class UpstreamEngines:
    """The local processes of the engines the watch forwards to, found as `preflight --host`
    finds its engine (probes/engine_identity.identify_engine: first the owner of the socket
    listening on the upstream's port, then that socket's user, then the engine's name), so
    the probes count their CPU as the engine's, not as background a remedy would close.

    An instance is a ProcessProbe pid source: calling it gives the pids now (the engines'
    processes and their children, read again at each call: Ollama starts a model's runner
    at its first request). The engines are looked for again every RECHECK_S seconds, and at
    the next call after one of their processes ended. Thread-safe; never raises.
    identify: identify_engine's stand-in (tests); clock: seconds, monotonic.
    """

    def __init__(self, upstreams: Sequence[str], *,
                 identify: Callable[[str], EngineIdentity] = identify_engine,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.upstreams = list(dict.fromkeys(upstreams))
        self._identify, self._clock = identify, clock
        self._lock = threading.Lock()
        self._found: list[EngineIdentity] = []
        self._roots: set[int] = set()
        self._at: float | None = None

    def identities(self) -> list[EngineIdentity]:
        """Each upstream's identity as last found (looking now when never looked)."""
        with self._lock:
            if self._at is None:
                self._look()
            return list(self._found)

    def __call__(self) -> set[int]:
        with self._lock:
            now = self._clock()
            gone = any(not psutil.pid_exists(p) for p in self._roots)
            if self._at is None or gone or now - self._at >= RECHECK_S:
                self._look()
            roots = set(self._roots)
        found = set(roots)
        for pid in roots:
            with contextlib.suppress(psutil.Error, OSError):
                found.update(c.pid for c in psutil.Process(pid).children(recursive=True))
        return found

    def _look(self) -> None:
        found = []
        for url in self.upstreams:
            try:
                found.append(self._identify(url))
            except Exception:  # noqa: BLE001 - identification is best effort, never fatal
                found.append(EngineIdentity(url, notes=("could not look for its processes",)))
        self._found = found
        self._roots = {p for i in found for p in i.pids}
        self._at = self._clock()

    def thread_setting(self) -> str | None:
        """How to give this watch's engine N threads, a format string with {n}
        (THREAD_SETTINGS, by the engine's catalogue name), for the probes' remedies; the
        general wording when the engine (or which of several) is not known."""
        with self._lock:
            apps = {i.app for i in self._found if i.local}
        if len(apps) == 1 and (app := apps.pop()) in THREAD_SETTINGS:
            return THREAD_SETTINGS[app]
        return THREAD_SETTING_UNKNOWN


def probe_sampler(interval_s: float, on_sample: Callable[[ProbeSample], None],
                  engines: UpstreamEngines,
                  measuring: bool | Callable[[], bool] = True) -> ProbeSampler:
    """The watch's probes: the upstreams' engine processes counted as the engine (found by
    their listening sockets, `engines`), this process and its children (the worker that
    names callers, the watch process under its screen) as llmtop, and a remedy's thread
    advice in the engine's own terms (`UpstreamEngines.thread_setting`). An engine that is
    a child of this process (a test's) stays the engine: llmtop's own pids leave it out.
    measuring: whether a request streams through the watch now (asked at each sample; the
    GPU is read on the sampler's slow beat otherwise: probes/sampler.py IDLE_GPU_BEAT_S)."""
    return ProbeSampler(interval_s, on_sample, lambda: own_pids() - engines(), engines,
                        thread_setting=engines.thread_setting, measuring=measuring)


def own_pids() -> set[int]:
    """This process and its descendants (the worker that names callers, the watch process
    under the screen): the watch's own work, never background. A ProcessProbe pid source."""
    pids = {os.getpid()}
    with contextlib.suppress(psutil.Error, OSError):
        pids.update(c.pid for c in psutil.Process().children(recursive=True))
    return pids


__all__ = [
    "DEFAULT_LISTEN",
    "THREAD_SETTINGS",
    "Pair",
    "UpstreamEngines",
    "WatchServer",
    "build_servers",
    "caller_pool",
    "is_own_address",
    "own_pids",
    "pairs_of",
    "probe_sampler",
    "run_servers",
    "split_listen",
]
