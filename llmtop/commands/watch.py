"""`llmtop watch`: stand between the user's own apps and their engine, pass every request
through unchanged, and measure the generations (docs/guide/watch.md).

Each `--upstream` gets its own listening address: the i-th `--listen` (default
127.0.0.1:11435), and for upstreams past the last `--listen` the next ports after it. All of
them run in one process and one event loop, feeding one session (`WatchSession`: one log of
kind "watch", one screen). `--json` is headless: one NDJSON line per finished request on
standard output, flushed. Without it the TUI's watch screen opens.

Safety: loopback by default; any other listening address needs `--token-file` (exit 2
otherwise, saying why), as `llmtop agent` does. Request text is kept out of the log and the
JSON lines unless `--log-bodies`; the screen shows it only with `--show-text`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import signal
import sys
from collections.abc import Generator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from types import FrameType

import uvicorn

from llmtop.commands.serving import GRACE_S, QuietServer
from llmtop.commands.tokens import is_loopback, read_token
from llmtop.engines.hosts import HostError, parse_address, resolve_host
from llmtop.exitcodes import ExitCode
from llmtop.probes.callers import CallerCache
from llmtop.probes.sampler import ProbeSampler
from llmtop.servers.child import port_problem, watch_parent
from llmtop.servers.guard import Guard
from llmtop.servers.watch.proxy import WatchProxy
from llmtop.sessions.records.log import LogError
from llmtop.sessions.runners.watch import WatchSession

PROG = "llmtop watch"
DEFAULT_LISTEN = "127.0.0.1:11435"
PROBE_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class Pair:
    """One proxy: where it listens (host, port) and the engine it forwards to (a URL)."""

    host: str
    port: int
    upstream: str

    @property
    def listen(self) -> str:
        """"host:port" ("[::1]:11435" for IPv6)."""
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"{shown}:{self.port}"


def split_listen(text: str) -> tuple[str, int]:
    """"127.0.0.1:11435" / "[::1]:11435" / ":11435" → (host, port); raises ValueError with
    what was wrong."""
    text = text.strip()
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"--listen {text!r} needs HOST:PORT with a port from 1 to 65535 "
                         "(e.g. 127.0.0.1:11435)")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


def pairs_of(listens: Sequence[str], upstreams: Sequence[str]) -> list[Pair]:
    """Pair the listening addresses with the upstreams (module docstring). Raises ValueError
    (a bad --listen, more --listen than --upstream, one port twice) or HostError."""
    urls = [resolve_host(u) for u in upstreams] or [resolve_host(None)]
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
        if parse_address(url, "--upstream").url == f"http://{host}:{port}":
            raise ValueError(f"--upstream {url} is the watch's own --listen: move the engine "
                             "to another port (docs/guide/watch.md)")
    return [Pair(host, port, url) for url, (host, port) in zip(urls, spots, strict=True)]


def check(args: argparse.Namespace) -> tuple[list[Pair], str | None, str]:
    """(pairs, token, "") when the watch may start as asked, else ([], None, why not)."""
    try:
        pairs = pairs_of(args.listen or (), args.upstream or ())
        token = read_token(args.token_file)
    except (ValueError, HostError) as exc:
        return [], None, str(exc)
    exposed = [p.listen for p in pairs if not is_loopback(p.host)]
    if exposed and token is None:
        return [], None, (f"refusing to listen on {', '.join(exposed)} without --token-file: "
                          "anyone who can reach it could make the engine generate; give a "
                          "token file (clients send it as `Authorization: Bearer TOKEN`), or "
                          "listen on 127.0.0.1")
    for p in pairs:
        problem = port_problem(p.host, p.port)
        if problem is not None:
            return [], None, (f"cannot listen on {p.listen} ({problem}); pick another --listen"
                              " (is the engine itself on that port? docs/guide/watch.md)")
    return pairs, token, ""


class PairServer(QuietServer):
    """A QuietServer that leaves the signals to `llmtop watch` (several run in one loop)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """No handlers of its own: `run_servers`' stop every server together."""
        yield


def build_servers(pairs: Sequence[Pair], session: WatchSession, token: str | None,
                  callers: CallerCache | None) -> list[PairServer]:
    """One uvicorn server per pair, each serving a WatchProxy that reports to `session` and
    names callers with `callers`. uvicorn adds no Server or Date header (the upstream's own
    pass through)."""
    servers = []
    for p in pairs:
        guard = Guard.from_env(p.host)
        app = WatchProxy(p.upstream, (p.host, p.port), session, guard=guard, token=token,
                         callers=callers)
        config = uvicorn.Config(app, host=p.host, port=p.port, log_level="warning",
                                access_log=False, server_header=False, date_header=False,
                                timeout_graceful_shutdown=GRACE_S)  # type: ignore[arg-type]
        servers.append(PairServer(config))
    return servers


async def run_servers(servers: Sequence[PairServer]) -> None:
    """Serve them all until one stops (a signal sets every `should_exit`)."""
    await asyncio.gather(*(s.serve() for s in servers))


def main(args: argparse.Namespace) -> int:
    """Run the watch until stopped (SIGTERM, SIGHUP, Ctrl+C, or the TUI's quit).

    Returns an ExitCode: OK after a stop, USAGE when it refuses to start (a bad --listen,
    no token off loopback, a port taken, a log that cannot be created)."""
    pairs, token, why = check(args)
    if why:
        print(f"{PROG}: {why}", file=sys.stderr)
        return ExitCode.USAGE
    if args.parent_pid:
        watch_parent(args.parent_pid)
    if not args.json:
        from llmtop.tui.watch import run_watch_tui

        return run_watch_tui(args, pairs, token)
    try:
        session = WatchSession([(p.listen, p.upstream) for p in pairs],
                               log_path=getattr(args, "log", None), bodies=args.log_bodies,
                               out=sys.stdout, prometheus=args.prometheus)
    except LogError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    for p in pairs:
        print(f"{PROG}: http://{p.listen} → {p.upstream}", file=sys.stderr, flush=True)
    print(f"{PROG}: logging to {session.log.path}", file=sys.stderr, flush=True)
    with caller_pool() as pool:
        callers = CallerCache(pool)
        callers.warm_up()  # start the worker now, not on the first request
        servers = build_servers(pairs, session, token, callers)
        return headless(session, servers, args.sample_probes)


@contextlib.contextmanager
def caller_pool() -> Generator[ProcessPoolExecutor, None, None]:
    """The one worker process that names callers (probes/callers.py says why a process),
    started by "spawn" (a fork of a threaded process is unsafe), shut down after."""
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    try:
        yield pool
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def headless(session: WatchSession, servers: Sequence[PairServer], probes: bool) -> int:
    """Serve with the probes sampling, until a stop signal; close the session after."""
    sampler = ProbeSampler(PROBE_INTERVAL_S, session.sampled) if probes else None

    def stop(_signum: int, _frame: FrameType | None) -> None:
        for s in servers:
            s.should_exit = True

    previous = {sig: signal.signal(sig, stop)
                for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        if sampler is not None:
            sampler.start()
        asyncio.run(run_servers(servers))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if sampler is not None:
            sampler.stop()
        session.close()
    print(f"{PROG}: stopped; {session.count} requests logged to {session.log.path}",
          file=sys.stderr, flush=True)
    return ExitCode.OK


__all__ = ["Pair", "build_servers", "check", "main", "pairs_of", "run_servers"]
