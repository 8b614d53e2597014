"""`llmtop compare A.jsonl B.jsonl [C.jsonl …]`: is B (and C …) faster than the baseline A?"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from llmtop.commands.flags import name_list
from llmtop.commands.output import emit, refuse_out
from llmtop.exitcodes import ExitCode, UsageError
from llmtop.sessions.measure.metrics import (
    COMPARE_METRICS,
    DEFAULT_COMPARE_METRICS,
    DEFAULT_THRESHOLD_PCT,
    VARY_CHOICES,
)

if TYPE_CHECKING:
    from llmtop.sessions.analysis.compare.logs import Comparison
    from llmtop.sessions.records.schema import RunLog

REGRESSION = ExitCode.NOISY  # 1: the number scripts test for "B got slower"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`llmtop compare`'s flags: the logs, the metrics, the threshold, --vary, the output."""
    p.add_argument("logs", nargs="+", metavar="LOG",
                   help="session logs: the first is the baseline A, each other is compared with it")
    p.add_argument("--metric", default=DEFAULT_COMPARE_METRICS,
                   type=name_list(tuple(COMPARE_METRICS), "metric"), metavar="LIST",
                   help=f"comma-separated, from {','.join(COMPARE_METRICS)} (default all)")
    p.add_argument("--format", choices=("md", "json", "html"), default="md", help="default md")
    p.add_argument("--out", metavar="FILE", help="write to FILE instead of standard output")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out file that is not an llmtop report")
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD_PCT, metavar="PCT",
                   help="%% slower (significantly) that counts as a regression: exit 1 "
                   f"(default {DEFAULT_THRESHOLD_PCT:g})")
    p.add_argument("--vary", default=(), type=name_list(VARY_CHOICES, "--vary item"),
                   metavar="LIST",
                   help="what differs on purpose, comma-separated, from "
                   f"{', '.join(VARY_CHOICES)}; any other difference refuses the comparison")
    p.add_argument("--seed", type=int, default=0, help="the bootstrap's seed (default 0)")


def _set_key(path: str, log: RunLog) -> tuple[str, str, int] | None:
    """Which `bench --runs K` set a log is a run of: (its folder, the set's stem, K), as
    `run_set` finds its siblings; None for a log that is no run of a set."""
    bench = log.header.bench
    if bench is None or bench.runs < 2:
        return None
    p = Path(path).resolve()
    return str(p.parent), p.stem.removesuffix(f"-run{bench.run}"), bench.runs


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
    an unreadable log, runs that are not comparable, or an unwritable --out: UsageError
    for all but the comparison's own refusal)."""
    from llmtop.sessions.analysis.compare.energy import compare_energy
    from llmtop.sessions.reports.compare import Comparisons
    from llmtop.sessions.reports.formats import render

    logs = _read_logs(args)
    comparisons = _compare(args, logs)
    energy = [[] if c.refused else compare_energy(logs[0], log, args.seed)
              for c, log in zip(comparisons, logs[1:], strict=True)]
    emit(render(Comparisons(comparisons, logs, energy), args.format), args.out, "llmtop compare")
    for c in comparisons:
        if c.refused:
            print(f"llmtop compare: {args.logs[0]} and {c.name_b} are not comparable: "
                  + "; ".join(c.checks.problems), file=sys.stderr)
    if any(c.refused for c in comparisons):
        return ExitCode.USAGE
    if any(c.regression or not c.trusted for c in comparisons):
        return REGRESSION
    return ExitCode.OK


def _read_logs(args: argparse.Namespace) -> list[RunLog]:
    """The logs `args.logs` names, each one's bad lines said on stderr, and a note where two
    name the same file. Raises UsageError for fewer than two logs, an --out that must not be
    written or a log that cannot be read."""
    from llmtop.sessions.records.log import LogError, read_log

    if len(args.logs) < 2:
        raise UsageError("give at least two logs (the baseline first)")
    refuse_out(args, args.logs)
    try:
        logs = [read_log(path) for path in args.logs]
    except LogError as exc:
        raise UsageError(str(exc)) from None
    for path in args.logs[1:]:
        if _same_file(args.logs[0], path):  # else zero differences, their cause unsaid
            print(f"llmtop compare: {args.logs[0]} and {path} are the same log: every "
                  "difference below is zero by construction", file=sys.stderr)
    for path, log in zip(args.logs, logs, strict=True):
        for warning in log.warnings:
            print(f"llmtop compare: {path}: {warning}", file=sys.stderr)
    return logs


def _compare(args: argparse.Namespace, logs: list[RunLog]) -> list[Comparison]:
    """Each log after the first compared with the first (`compare_logs`): a `bench --runs`
    set by its runs' baselines, two runs of one set by the runs themselves."""
    from llmtop.sessions.analysis.compare.logs import compare_logs
    from llmtop.sessions.analysis.compare.runs import run_set

    sets = []
    keys = [_set_key(path, log) for path, log in zip(args.logs, logs, strict=True)]
    for path, log, key in zip(args.logs, logs, keys, strict=True):
        found, notes = run_set(path, log)
        for note in notes:
            print(f"llmtop compare: {path}: {note}", file=sys.stderr)
        if len(found) > 1 and key is not None and keys.count(key) == 1:  # else: said below
            run = log.header.bench.run if log.header.bench else None
            print(f"llmtop compare: {path} is run {run} of a "
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
    return comparisons
