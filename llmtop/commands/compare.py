"""`llmtop compare A.jsonl B.jsonl [C.jsonl …]`: is B (and C …) faster than the baseline A?"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from llmtop.commands.output import emit, out_refused
from llmtop.exitcodes import ExitCode
from llmtop.sessions.analysis.compare.energy import compare_energy
from llmtop.sessions.analysis.compare.logs import compare_logs
from llmtop.sessions.analysis.compare.runs import run_set
from llmtop.sessions.records.log import LogError, read_log
from llmtop.sessions.records.schema import RunLog
from llmtop.sessions.reports.compare import Comparisons
from llmtop.sessions.reports.formats import render

REGRESSION = ExitCode.NOISY  # 1: the number scripts test for "B got slower"


def _set_key(path: str, log: RunLog) -> tuple[str, str, int] | None:
    """Which `bench --runs K` set a log is a run of: (its folder, the set's stem, K), as
    `run_set` finds its siblings; None for a log that is no run of a set."""
    bench = log.header.bench or {}
    runs, run = bench.get("runs"), bench.get("run")
    if not isinstance(runs, int) or not isinstance(run, int) or runs < 2:
        return None
    p = Path(path).resolve()
    return str(p.parent), p.stem.removesuffix(f"-run{run}"), runs


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
        if _same_file(args.logs[0], path):  # else zero differences, their cause unsaid
            print(f"llmtop compare: {args.logs[0]} and {path} are the same log: every "
                  "difference below is zero by construction", file=sys.stderr)
    for path, log in zip(args.logs, logs, strict=True):
        for warning in log.warnings:
            print(f"llmtop compare: {path}: {warning}", file=sys.stderr)
    sets = []
    keys = [_set_key(path, log) for path, log in zip(args.logs, logs, strict=True)]
    for path, log, key in zip(args.logs, logs, keys, strict=True):
        found, notes = run_set(path, log)
        for note in notes:
            print(f"llmtop compare: {path}: {note}", file=sys.stderr)
        if len(found) > 1 and key is not None and keys.count(key) == 1:  # else: said below
            print(f"llmtop compare: {path} is run {(log.header.bench or {}).get('run')} of a "
                  f"set of {len(found)}: comparing the runs' baselines", file=sys.stderr)
        sets.append(found)
    comparisons = []
    for path, log, found in zip(args.logs[1:], logs[1:], sets[1:], strict=True):
        pair = (sets[0], found)
        if len(found) > 1 and _set_key(args.logs[0], logs[0]) == _set_key(path, log):
            # two runs of one `--runs` set: its baselines against themselves would say "no
            # difference" whatever the runs measured
            print(f"llmtop compare: {args.logs[0]} and {path} are runs of one set: comparing "
                  "the two runs themselves", file=sys.stderr)
            pair = ([logs[0]], [log])
        comparisons.append(compare_logs(logs[0], log, (args.logs[0], path), args.metric,
                                        args.vary, args.threshold, args.seed, runs=pair))
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
