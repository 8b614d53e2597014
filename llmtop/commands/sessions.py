"""`llmtop sessions`: the saved session logs, newest first."""

from __future__ import annotations

import argparse
import json
import os
import sys

from llmtop.exitcodes import ExitCode
from llmtop.sessions.analysis.catalog import SessionEntry, catalogue, sessions_folder
from llmtop.sessions.reports.text import md_table

HEADERS = ("date", "engine", "model", "kind", "requests (ok)", "verdict", "log")


def row(e: SessionEntry) -> tuple[object, ...]:
    """One table row; an unreadable log shows its reason in the verdict column."""
    date = (e.started or "")[:19].replace("T", " ") or "n/a"
    verdict = e.verdict if e.problem is None else f"unreadable: {e.problem}"
    return (date, e.engine, e.model, e.kind, f"{e.requests} ({e.ok})", verdict, e.path)


def main(args: argparse.Namespace) -> int:
    """List the logs in the folders or files given (default: the user data dir's
    sessions folder) as a markdown table or, with --json, a JSON array. Returns 0, or 2
    when a path given does not exist."""
    missing = [p for p in args.paths if not os.path.exists(p)]
    if missing:
        print(f"llmtop sessions: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return ExitCode.USAGE
    entries = catalogue(args.paths)
    if args.json:
        print(json.dumps([e.to_dict() for e in entries], indent=2, ensure_ascii=False))
        return ExitCode.OK
    if not entries:
        where = ", ".join(args.paths) or str(sessions_folder())
        print(f"no session logs in {where}")
        return ExitCode.OK
    print("\n".join(md_table(HEADERS, [row(e) for e in entries])))
    return ExitCode.OK
