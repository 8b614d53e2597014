"""Reaching the engine the engine flags name, as every headless command does."""

from __future__ import annotations

import argparse
import json
import sys

from llmtop.connect import connect
from llmtop.engines.base import EngineError
from llmtop.engines.connection import Connection
from llmtop.engines.events import exit_code_for


async def connect_from_flags(args: argparse.Namespace, via: str | None = None) -> Connection | int:
    """`connect()` with the parsed engine flags (`via` overrides `--via`). On EngineError it
    prints "llmtop: <failure>" to stderr and returns the failure's exit code instead; with
    `--json` it also prints one JSON object on stdout, `{"status": "error", "error": {"kind",
    "message", "remedy"}, "exit_code"}`, so a script reading stdout gets an answer (without
    it, `run --json` to an unreachable host printed nothing there)."""
    try:
        return await connect(
            args.engine,
            args.host,
            args.model,
            args.model_path,
            via or args.via,
            args.relay,
            args.engine_pids,
        )
    except EngineError as exc:
        failure, code = exc.failure, exit_code_for(exc.failure.kind)
        print(f"llmtop: {failure}", file=sys.stderr)
        if getattr(args, "json", False):
            error = {"kind": str(failure.kind), "message": failure.message,
                     "remedy": failure.remedy}
            print(json.dumps({"status": "error", "error": error, "exit_code": int(code)}),
                  flush=True)
        return code
