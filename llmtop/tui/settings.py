"""The plain settings the TUI is built from (no Textual here, so the CLI can build them cheaply)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

DEFAULT_PROBE_INTERVAL_S = 1.0


@dataclass(frozen=True)
class TuiSettings:
    """What `make_app` needs.

    engine: "auto", "ollama" or "embedded" (see `llmtop.engines.launcher.connect`).
    host / model / model_path: as the CLI flags; None = the launcher's default.
    options: the Ollama `options` sent with every request (temperature, seed, num_predict…).
    log_path: the session log (JSONL); None = a new file in the user data directory.
    probe_interval_s: seconds between probe samples while idle; halved while a request streams.
    probes: False runs no probe sampler (tests post samples themselves).
    """

    engine: str = "auto"
    host: str | None = None
    model: str | None = None
    model_path: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    log_path: str | None = None
    probe_interval_s: float = DEFAULT_PROBE_INTERVAL_S
    probes: bool = True

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TuiSettings:
        """Build from the parsed `llmtop` command line (see `llmtop.cli.build_parser`)."""
        from llmtop.cli import generation_options

        return cls(
            engine=args.engine,
            host=args.host,
            model=args.model,
            model_path=args.model_path,
            options=generation_options(args),
            log_path=args.log,
        )
