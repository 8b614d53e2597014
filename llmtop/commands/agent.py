"""`llmtop agent`: serve this machine's probe samples to llmtop on another machine (blocks).

Run it where the engine runs; point llmtop at it with `--probes http://THIS-HOST:11500`. It
binds loopback unless told otherwise, and refuses (exit 2, saying why) to listen on any other
address without `--token-file`; with a token, every request must carry it. It exits when the
process given as `--parent-pid` is gone (tests) and on SIGTERM or Ctrl+C.
"""

from __future__ import annotations

import argparse
import signal
import sys

from llmtop.commands.flags import pid_number, port_number
from llmtop.commands.tokens import is_loopback, read_token
from llmtop.engines.hosts import HostError, resolve_host
from llmtop.exitcodes import ExitCode, UsageError
from llmtop.files import readable_by_others

PROG = "llmtop agent"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`llmtop agent`'s flags: where it listens, its token, the engine on this machine."""
    p.add_argument("--host", default="127.0.0.1",
                   help="bind address (default 127.0.0.1; any other needs --token-file)")
    p.add_argument("--port", type=port_number, default=11500, help="port (default 11500)")
    p.add_argument("--token-file", metavar="PATH",
                   help="a file holding the token every request must carry (Bearer)")
    p.add_argument("--engine-host", metavar="URL", help="the engine on this machine "
                   "(default: $OLLAMA_HOST or 127.0.0.1:11434)")
    p.add_argument("--engine-pid", metavar="PID", type=pid_number, action="append",
                   help="a pid of the engine (repeatable) when it cannot be identified")
    p.add_argument("--interval", type=float, default=0.5,
                   help="seconds between samples (default 0.5)")
    p.add_argument("--share-cmdlines", action="store_true",
                   help="send the busiest apps' command lines (they can hold secrets)")
    p.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    p.add_argument("--clock-offset-ns", type=int, default=0, help=argparse.SUPPRESS)


def check(args: argparse.Namespace) -> tuple[str | None, str]:
    """(token, "") when the agent may start as asked, else (None, why not)."""
    from llmtop.servers.child import port_problem

    try:
        token = read_token(args.token_file)
    except ValueError as exc:
        return None, str(exc)
    if not args.interval > 0:
        return None, f"--interval must be > 0 seconds, got {args.interval}"
    if token is None and not is_loopback(args.host):
        return None, (f"refusing to listen on {args.host} without --token-file: anyone who can "
                      "reach it could read this machine's state; give a token file (and the "
                      "same token to llmtop with --probes-token-file), or bind 127.0.0.1")
    problem = port_problem(args.host, args.port)
    if problem is not None:
        return None, f"cannot listen on {args.host}:{args.port} ({problem}); pick another --port"
    return token, ""


def main(args: argparse.Namespace) -> int:
    """Serve until stopped. Returns an ExitCode: OK after SIGTERM or Ctrl+C, USAGE when it
    refuses to start (UsageError: no token off loopback, bad token file, port taken, bad
    --engine-host)."""
    import uvicorn

    from llmtop.servers.agent.server import Agent, create_app
    from llmtop.servers.child import watch_parent

    token, why = check(args)
    if why:
        raise UsageError(why)
    loose = readable_by_others(args.token_file) if args.token_file else None
    if loose is not None:
        print(f"{PROG}: warning: {loose}", file=sys.stderr)
    try:
        engine_host = resolve_host(args.engine_host)
    except HostError as exc:
        raise UsageError(str(exc)) from None
    if args.parent_pid:
        watch_parent(args.parent_pid)
    agent = Agent(engine_host, args.interval, engine_pids=tuple(args.engine_pid or ()),
                  share_cmdlines=args.share_cmdlines, clock_offset_ns=args.clock_offset_ns)

    def _terminated(_signum: int, _frame: object) -> None:
        raise SystemExit(ExitCode.OK)

    previous = signal.signal(signal.SIGTERM, _terminated)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"{PROG}: serving {agent.machine}'s probes at http://{shown}:{args.port}/ "
          f"(engine {engine_host}; {'token required' if token else 'no token: loopback only'}"
          f"{'; sharing command lines' if args.share_cmdlines else ''})", file=sys.stderr,
          flush=True)
    try:
        uvicorn.run(create_app(agent, token), host=args.host, port=args.port,
                    log_level="warning", access_log=False, timeout_graceful_shutdown=1)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return ExitCode.OK
