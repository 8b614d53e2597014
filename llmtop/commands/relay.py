"""`llmtop relay`: serve the SSE relay and its page in front of an Ollama-API server (blocks).

It binds loopback unless told otherwise (and warns when told otherwise), fixes the upstream
at start, and — like `llmtop engine` — exits when the process given as `--parent-pid` is
gone. Without `--upstream` it uses Ollama at `$OLLAMA_HOST`/127.0.0.1:11434 when that answers
within 0.5 s, else it starts the embedded engine as its own child process and stops it on exit.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from llmtop.commands.flags import INT32_MAX, port_number, whole_number
from llmtop.engines.hosts import API_KEY_ENV, HostError, parse_address, resolve_host
from llmtop.exitcodes import ExitCode, UsageError

if TYPE_CHECKING:
    from llmtop.servers.child import EmbeddedProcess
    from llmtop.servers.guard import Guard

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`llmtop relay`'s flags: where it listens and the upstream it relays."""
    p.add_argument("--host", default="127.0.0.1",
                   help="bind address (default 127.0.0.1; anything else warns)")
    p.add_argument("--port", type=port_number, default=8000, help="port (default 8000)")
    p.add_argument("--upstream", help="Ollama-API URL (default: Ollama at $OLLAMA_HOST or "
                   "127.0.0.1:11434 if it answers, else the embedded engine)")
    p.add_argument("--upstream-api", choices=("ollama", "openai"), default="ollama",
                   help="what the upstream speaks (default ollama; openai: an OpenAI-compatible "
                   "server, e.g. --upstream http://127.0.0.1:8080/v1)")
    p.add_argument("--parent-pid", type=whole_number(1, INT32_MAX), help=argparse.SUPPRESS)


def main(args: argparse.Namespace) -> int:
    """Serve the relay on args.host:args.port in front of args.upstream (blocks).

    Returns an ExitCode: OK after a normal stop (SIGTERM, SIGHUP or Ctrl+C: `serving.serve`),
    USAGE when the port cannot be bound or $LLMTOP_MAX_BODY_BYTES is not a size,
    ENGINE_UNREACHABLE when no upstream was given and the embedded engine failed to start.
    Raises UsageError for a bad --upstream, a port that cannot be bound or an
    $LLMTOP_MAX_BODY_BYTES that is not a size.
    """
    from llmtop.commands.serving import leave
    from llmtop.servers.child import port_problem, watch_parent
    from llmtop.servers.guard import Guard

    host, port = args.host, args.port
    if args.upstream is not None:
        try:
            args.upstream = parse_address(args.upstream, "--upstream").url
        except HostError as exc:
            raise UsageError(str(exc)) from None
    try:
        guard = Guard.from_env(host)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    problem = port_problem(host, port)
    if problem is not None:
        raise UsageError(f"cannot listen on {host}:{port} ({problem}); pick another --port")
    if host not in LOOPBACK:
        print(f"llmtop relay: WARNING: listening on {host}, reachable beyond this machine; "
              "anyone who can reach it can make the upstream generate", file=sys.stderr)
    if args.parent_pid:
        watch_parent(args.parent_pid)
    code = _serve(args.upstream, host, port, guard, getattr(args, "upstream_api", "ollama"))
    if code == ExitCode.OK:
        leave(code)  # served, stopped and cleaned up (serving.leave: a faster exit)
    return code


def _serve(upstream_arg: str | None, host: str, port: int, guard: Guard,
           api: str = "ollama") -> int:
    """Find or start the upstream, then serve until stopped: ExitCode.OK, or
    ENGINE_UNREACHABLE when the embedded engine it started failed."""
    import asyncio

    from llmtop.commands.serving import serve
    from llmtop.engines.base import EngineError
    from llmtop.engines.ollama import ollama_version
    from llmtop.engines.openai import api_base
    from llmtop.engines.openai_server import openai_models
    from llmtop.servers.child import EmbeddedProcess
    from llmtop.servers.relay.server import create_app

    engine: EmbeddedProcess | None = None
    try:
        if api == "openai":  # an OpenAI-compatible upstream (llama-server, vLLM, …)
            upstream = api_base(upstream_arg or resolve_host(None))
            if asyncio.run(openai_models(upstream, os.environ.get(API_KEY_ENV), 2.0)) is None:
                print(f"llmtop relay: warning: nothing lists models at {upstream}/models yet; "
                      "requests will get an error event until it does", file=sys.stderr)
        elif upstream_arg:
            upstream = resolve_host(upstream_arg)
            if asyncio.run(ollama_version(upstream, timeout_s=2.0)) is None:
                print(f"llmtop relay: warning: nothing answers at {upstream} yet; requests will "
                      "get an error event until it does", file=sys.stderr)
        else:
            upstream = resolve_host(None)
            if asyncio.run(ollama_version(upstream)) is None:
                print(f"llmtop relay: no Ollama at {upstream}; starting the embedded engine…",
                      file=sys.stderr, flush=True)
                engine = EmbeddedProcess()
                try:
                    EmbeddedProcess.require(tried=upstream)
                    asyncio.run(engine.start())
                except EngineError as exc:
                    print(f"llmtop relay: {exc}", file=sys.stderr)
                    return ExitCode.ENGINE_UNREACHABLE
                upstream = engine.host
        shown = f"[{host}]" if ":" in host else host
        print(f"llmtop relay: http://{shown}:{port}/ → upstream {upstream}", file=sys.stderr,
              flush=True)
        serve(create_app(upstream, guard=guard, api=api), host, port, "llmtop relay")
        return ExitCode.OK
    finally:
        if engine is not None:
            engine.stop()
