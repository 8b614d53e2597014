"""`llmtop sessions`: the saved session logs, newest first: aligned columns on a terminal (as
`ollama list` prints), a markdown table when piped, a JSON array with --json."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from llmtop.exitcodes import ExitCode, UsageError
from llmtop.sessions.reports.text import md_table

if TYPE_CHECKING:
    from llmtop.sessions.analysis.catalog import SessionEntry

HEADERS = ("date", "engine", "model", "kind", "requests", "verdict", "log")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`llmtop sessions`' flags: the paths to list, --json."""
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="log files or folders (default: the user data dir's sessions folder)")
    p.add_argument("--json", action="store_true", help="print one JSON array instead of a table")


def row(e: SessionEntry, folder: Path | None = None) -> tuple[str, ...]:
    """One table row; an unreadable log shows its reason in the verdict column, a single
    request "—" (nothing to judge). folder: paths inside it are shown by file name."""
    path = Path(e.path)
    shown = path.name if folder is not None and path.parent == folder else e.path
    return (*e.cells(), shown)


def columns(rows: list[tuple[str, ...]]) -> list[str]:
    """The rows under upper-case headers, each column as wide as its widest cell, three
    spaces apart; the last column is not padded."""
    table = [tuple(h.upper() for h in HEADERS), *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADERS) - 1)]
    return ["   ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[-1]]).rstrip()
            for r in table]


def main(args: argparse.Namespace) -> int:
    """List the logs in the folders or files given (default: the user data dir's
    sessions folder) as a markdown table or, with --json, a JSON array. Returns 0, or 2
    when a path given does not exist (UsageError)."""
    from llmtop.sessions.analysis.catalog import catalogue, sessions_folder

    missing = [p for p in args.paths if not os.path.exists(p)]
    if missing:
        raise UsageError(f"no such file or folder: {', '.join(missing)}")
    entries = catalogue(args.paths)
    if args.json:
        print(json.dumps([e.to_dict() for e in entries], indent=2, ensure_ascii=False))
        return ExitCode.OK
    if not entries:
        where = ", ".join(args.paths) or str(sessions_folder())
        print(f"no session logs in {where}")
        return ExitCode.OK
    if sys.stdout.isatty():
        folder = sessions_folder() if not args.paths else None
        print("\n".join(columns([row(e, folder) for e in entries])))
        if folder is not None:
            print(f"\n(logs in {folder})")
    else:
        print("\n".join(md_table(HEADERS, [row(e) for e in entries])))
    return ExitCode.OK
