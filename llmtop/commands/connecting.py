"""Reaching the engine the engine flags name, as every headless command does."""

from __future__ import annotations

import argparse
import sys

from llmtop.connect import connect
from llmtop.engines.base import EngineError
from llmtop.engines.connection import Connection
from llmtop.engines.events import exit_code_for


async def connect_from_flags(args: argparse.Namespace, via: str | None = None) -> Connection | int:
    """`connect()` with the parsed engine flags (`via` overrides `--via`). On EngineError it
    prints "llmtop: <failure>" to stderr and returns the failure's exit code instead."""
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
        print(f"llmtop: {exc.failure}", file=sys.stderr)
        return exit_code_for(exc.failure.kind)
