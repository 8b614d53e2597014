"""`llmtop compare A.jsonl B.jsonl [C.jsonl …]`: is B (and C …) faster than the baseline A?"""

from __future__ import annotations

import argparse
import os
import sys

from llmtop.commands.output import emit, out_refused
from llmtop.exitcodes import ExitCode
from llmtop.sessions.analysis.compare import compare_logs
from llmtop.sessions.analysis.compare_runs import run_set
from llmtop.sessions.analysis.energy_compare import compare_energy
from llmtop.sessions.records.log import LogError, read_log
from llmtop.sessions.records.schema import RunLog
from llmtop.sessions.reports.compare import Comparisons
from llmtop.sessions.reports.formats import render

REGRESSION = ExitCode.NOISY  # 1: the number scripts test for "B got slower"


def _same_file(a: str, b: str) -> bool:
    """True when the two paths name one file (a link, another spelling of the path)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def main(args: argparse.Namespace) -> int:
    """Compare each log after the first with the first. Returns 0 (no regression), 1 (a
    metric significantly slower beyond --threshold, or a comparison NOT ATTRIBUTABLE: a
    CONTAMINATED or noisy run on either side, so no "no regression" can be claimed; a CI gate
    on the exit code must not pass what the headline distrusts), or 2 (fewer than two logs,
    an unreadable log, runs that are not comparable, or an unwritable --out)."""
    if len(args.logs) < 2:
        print("llmtop compare: give at least two logs (the baseline first)", file=sys.stderr)
        return ExitCode.USAGE
    if out_refused(args, args.logs, "llmtop compare"):
        return ExitCode.USAGE
    logs: list[RunLog] = []
    try:
        for path in args.logs:
            logs.append(read_log(path))
    except LogError as exc:
        print(f"llmtop compare: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    for path in args.logs[1:]:
        if _same_file(args.logs[0], path):  # new-user pass N43: said nowhere
            print(f"llmtop compare: {args.logs[0]} and {path} are the same log: every "
                  "difference below is zero by construction", file=sys.stderr)
    for path, log in zip(args.logs, logs, strict=True):
        for warning in log.warnings:
            print(f"llmtop compare: {path}: {warning}", file=sys.stderr)
    sets = []
    for path, log in zip(args.logs, logs, strict=True):
        found, notes = run_set(path, log)
        for note in notes:
            print(f"llmtop compare: {path}: {note}", file=sys.stderr)
        if len(found) > 1:
            print(f"llmtop compare: {path} is run {(log.header.bench or {}).get('run')} of a "
                  f"set of {len(found)}: comparing the runs' baselines", file=sys.stderr)
        sets.append(found)
    comparisons = [
        compare_logs(logs[0], log, (args.logs[0], path), args.metric, args.vary,
                     args.threshold, args.seed, runs=(sets[0], found))
        for path, log, found in zip(args.logs[1:], logs[1:], sets[1:], strict=True)
    ]
    energy = [[] if c.refused else compare_energy(logs[0], log, args.seed)
              for c, log in zip(comparisons, logs[1:], strict=True)]
    text = render(Comparisons(comparisons, logs, energy), args.format)
    if not emit(text, args.out, "llmtop compare"):
        return ExitCode.USAGE
    for c in comparisons:
        if c.refused:
            print(f"llmtop compare: {args.logs[0]} and {c.name_b} are not comparable: "
                  + "; ".join(c.checks.problems), file=sys.stderr)
    if any(c.refused for c in comparisons):
        return ExitCode.USAGE
    if any(c.regression or not c.trusted for c in comparisons):
        return REGRESSION
    return ExitCode.OK
