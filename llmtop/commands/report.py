"""`llmtop report`: render any session log again, from the log alone."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from llmtop.exitcodes import ExitCode
from llmtop.sessions.load_analysis import analyze_load, is_load_log
from llmtop.sessions.load_report import render_load
from llmtop.sessions.log import LogError, read_log
from llmtop.sessions.report import build, render


def main(args: argparse.Namespace) -> int:
    """`llmtop report LOG`: render a session log (md, csv or json) to stdout or --out;
    returns an ExitCode (USAGE for an unreadable log or an unwritable --out)."""
    if is_load_log(args.log_file):  # a `llmtop load` sweep: its own per-level report
        return _write(args, lambda: render_load(analyze_load(args.log_file), args.format))

    def session_text() -> str:
        log = read_log(args.log_file)
        text = render(build(log), args.format)
        for warning in log.warnings:
            print(f"llmtop report: {args.log_file}: {warning}", file=sys.stderr)
        return text

    return _write(args, session_text)


def _write(args: argparse.Namespace, make_text: Callable[[], str]) -> int:
    """Render with `make_text` and write to --out or stdout; USAGE on a log or file error."""
    try:
        text = make_text()
    except LogError as exc:
        print(f"llmtop report: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    if not args.out:
        sys.stdout.write(text)
        return ExitCode.OK
    try:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        print(f"llmtop report: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return ExitCode.USAGE
    return ExitCode.OK
