"""`llmtop watch`: stand between the user's own apps and their engine, pass every request
through unchanged, and measure the generations (docs/guide/watch.md).

Each `--upstream` gets its own listening address: the i-th `--listen` (default
127.0.0.1:11436), and for upstreams past the last `--listen` the next ports after it. All of
them run in one process and one event loop, feeding one session (`WatchSession`: one log of
kind "watch", one screen). `--json` is headless: one NDJSON line per finished request on
standard output, flushed. Without it the TUI's watch screen opens.

Safety: loopback by default; any other listening address needs `--token-file` (exit 2
otherwise, saying why), as `llmtop agent` does. Request text is kept out of the log and the
JSON lines unless `--log-bodies`; the screen shows it only with `--show-text`.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING

from llmtop.commands.flags import INT32_MAX, whole_number
from llmtop.commands.tokens import is_loopback, read_token
from llmtop.engines.hosts import HostError
from llmtop.exitcodes import ExitCode, UsageError

if TYPE_CHECKING:
    from llmtop.servers.watch.proxy import WatchServer
    from llmtop.sessions.runners.watch.serving import Pair, UpstreamEngines
    from llmtop.sessions.runners.watch.session import WatchSession

PROG = "llmtop watch"
PROBE_INTERVAL_S = 1.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`llmtop watch`'s flags: where the apps connect, the engines behind, what is kept."""
    p.add_argument("--listen", metavar="HOST:PORT", action="append",
                   help="where the apps connect (default 127.0.0.1:11436; repeatable, one per "
                   "--upstream; any address but loopback needs --token-file)")
    p.add_argument("--upstream", metavar="URL", action="append",
                   help="the engine requests go on to (default: $OLLAMA_HOST or "
                   "127.0.0.1:11434; repeatable: each gets its own --listen, or the next port)")
    p.add_argument("--json", action="store_true",
                   help="headless: one NDJSON line per finished request on standard output")
    p.add_argument("--log", metavar="PATH", default=argparse.SUPPRESS,
                   help="the session log (default: a new file in the user data dir)")
    p.add_argument("--log-bodies", action="store_true",
                   help="keep the prompts' and answers' text in the log and the JSON lines")
    p.add_argument("--show-text", action="store_true",
                   help="show the selected request's text on the screen (off: privacy)")
    p.add_argument("--prometheus", metavar="PATH",
                   help="rewrite a Prometheus textfile at PATH after each request")
    p.add_argument("--token-file", metavar="PATH",
                   help="a file holding the token every request must carry (Bearer)")
    p.add_argument("--no-probes", dest="sample_probes", action="store_false",
                   help="do not sample the machine (no verdict per request)")
    p.add_argument("--live", action="store_true", help=argparse.SUPPRESS)  # the screen's feed
    p.add_argument("--parent-pid", type=whole_number(1, INT32_MAX), help=argparse.SUPPRESS)


def check(args: argparse.Namespace) -> tuple[list[Pair], str | None, str]:
    """(pairs, token, "") when the watch may start as asked, else ([], None, why not)."""
    from llmtop.servers.child import port_problem
    from llmtop.sessions.runners.watch.serving import pairs_of

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


def prepare(args: argparse.Namespace) -> tuple[list[Pair], str | None]:
    """The pairs and token to serve with; UsageError saying why not (a bad --listen, no
    token off loopback, a port taken). Starts watching `--parent-pid`."""
    from llmtop.servers.child import watch_parent

    pairs, token, why = check(args)
    if why:
        raise UsageError(why)
    if args.parent_pid:
        watch_parent(args.parent_pid)
    return pairs, token


def main(args: argparse.Namespace) -> int:
    """Run the headless watch (`--json`) until stopped (SIGTERM, SIGHUP, Ctrl+C); the
    screen is tui/watch.py's, which the CLI starts after `prepare`.

    Returns ExitCode.OK after a stop; raises UsageError when it refuses to start (`prepare`,
    a log that cannot be created, an address taken since `check` looked)."""
    from llmtop.probes.callers import CallerCache
    from llmtop.sessions.records.log import LogError
    from llmtop.sessions.runners.watch.serving import (
        UpstreamEngines,
        build_servers,
        caller_pool,
        silent_upstream,
    )
    from llmtop.sessions.runners.watch.session import WatchSession

    pairs, token = prepare(args)
    try:
        session = WatchSession([(p.listen, p.upstream) for p in pairs],
                               log_path=getattr(args, "log", None), bodies=args.log_bodies,
                               out=sys.stdout, prometheus=args.prometheus, live=args.live,
                               show_text=args.show_text)
    except LogError as exc:
        raise UsageError(str(exc)) from None
    for p in pairs:
        print(f"{PROG}: http://{p.listen} → {p.upstream}", file=sys.stderr, flush=True)
        if (silent := silent_upstream(p)) is not None:
            print(f"{PROG}: warning: {silent}", file=sys.stderr, flush=True)
    print(f"{PROG}: logging to {session.log.path}", file=sys.stderr, flush=True)
    engines = UpstreamEngines([p.upstream for p in pairs]) if args.sample_probes else None
    for identity in engines.identities() if engines is not None else ():
        print(f"{PROG}: {identity.host}: {identity.describe()}", file=sys.stderr, flush=True)
    with caller_pool() as pool:
        callers = CallerCache(pool)
        callers.warm_up()  # start the worker now, not on the first request
        servers = build_servers(pairs, session, token, callers)
        return headless(session, servers, engines)


def headless(session: WatchSession, servers: Sequence[WatchServer],
             engines: UpstreamEngines | None) -> int:
    """Serve with the probes sampling (None: no probes, `--no-probes`), until a stop signal;
    close the session after. Returns ExitCode.OK; UsageError when an address was taken since
    `check` looked."""
    import asyncio

    from llmtop.servers.watch.proxy import loop_factory
    from llmtop.sessions.runners.watch.serving import probe_sampler, run_servers

    # the GPU read in every sample only while a request streams through (the sampler's slow
    # beat between them: a watch is left running for hours)
    sampler = (probe_sampler(PROBE_INTERVAL_S, session.sampled, engines,
                             measuring=lambda: bool(session.streaming))
               if engines is not None else None)

    def stop(_signum: int, _frame: FrameType | None) -> None:
        for s in servers:
            s.should_exit = True

    previous = {sig: signal.signal(sig, stop)
                for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        if sampler is not None:
            sampler.start()
        with asyncio.Runner(loop_factory=loop_factory()) as runner:  # uvloop where installed
            runner.run(run_servers(servers))
    except OSError as exc:  # an address taken since `check` looked
        raise UsageError(f"cannot listen: {exc}; pick another --listen") from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if sampler is not None:
            sampler.stop()
        session.close()
    n = session.count
    print(f"{PROG}: stopped; {n} request{'s' if n != 1 else ''} logged to {session.log.path}",
          file=sys.stderr, flush=True)
    return ExitCode.OK
