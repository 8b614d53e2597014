"""`llmtop watch`'s screen (placeholder until the watch screen lands)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def run_watch_tui(args: argparse.Namespace, pairs: Any, token: str | None) -> int:
    """Not yet: say to use --json."""
    print("llmtop watch: the screen is not built yet; use --json", file=sys.stderr)
    return 2
