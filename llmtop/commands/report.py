"""`llmtop report`: render any session log again, from the log alone (a replay's, from it and
the watch log it replayed)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from llmtop.commands.output import emit, refuse_out
from llmtop.exitcodes import ExitCode, UsageError

if TYPE_CHECKING:
    from llmtop.sessions.records.schema import RunLog
    from llmtop.sessions.reports.formats import Subject

SHOWN_WARNINGS = 10  # bad lines named one by one; the rest are counted


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`llmtop report`'s flags: the log, the format, --as, --out and --force."""
    p.add_argument("log_file", metavar="LOG", help="a session log (JSONL) written by llmtop, "
                   "or the .engines.json file of `bench --engines` (its engines compared)")
    p.add_argument("--format", choices=("md", "csv", "json", "html"), default="md",
                   help="default md; html: one self-contained file with plots")
    p.add_argument("--as", dest="as_tool", choices=("vllm", "aiperf", "guidellm", "llama-server"),
                   help="show the run in another tool's metric definitions (md or json), "
                   "beside llmtop's (docs/guide/peers.md)")
    p.add_argument("--out", help="write to FILE instead of standard output")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out file that is not an llmtop report")


def _as_tool(log: RunLog, args: argparse.Namespace) -> str:
    """The run in `--as`'s definitions; raises UsageError for a format it has not (csv,
    html)."""
    from llmtop.sessions.analysis.run import analyze_run, noisy_samples
    from llmtop.sessions.reports import peers

    if args.format not in ("md", "json"):
        raise UsageError(f"--as renders md or json, not {args.format}: use --format md or json")
    render_as = peers.json_text if args.format == "json" else peers.markdown
    analysis = analyze_run(log)
    judgement = analysis.judgement
    noisy, samples = noisy_samples(log.probes)
    trust = peers.Trust(str(judgement.word), judgement.reasons, noisy, samples)
    # the requests the report counts: not a cold start, a cache hit, an excluded one (else
    # --as counted "cached" requests the report leaves out)
    counted = {r.record.id for s in analysis.sizes for r in s.ok}
    records = [r for r in log.requests if r.id in counted]
    return render_as(records, args.as_tool, str(args.log_file), trust)


def _engine_set(args: argparse.Namespace) -> str:
    """An engine set's comparison (records/engine_set.py: the set's file, then each engine's
    log) in md, json or html; raises UsageError for csv or --as, an unreadable set or log."""
    from llmtop.sessions.analysis.engine_set import analyze_set
    from llmtop.sessions.records.engine_set import read_set
    from llmtop.sessions.records.log import LogError, read_log
    from llmtop.sessions.reports.formats import render

    if args.format == "csv" or getattr(args, "as_tool", None):
        raise UsageError("an engine set's report is md, json or html (no csv, no --as): "
                         "`llmtop report` each engine's log for those")
    try:
        engine_set = read_set(args.log_file)
        logs = [read_log(engine_set.log_path(e), chunks=args.format == "html")
                for e in engine_set.engines]
    except LogError as exc:
        raise UsageError(str(exc)) from None
    return render(analyze_set(engine_set, logs), args.format)


def _subject(log: RunLog) -> Subject:
    """What a log's report shows: a run's Report, a sweep's LoadAnalysis (with, for a
    `load --replay` log, the comparison with the watch log it replayed: ReplayReport), a
    watch log's WatchAnalysis. Raises ValueError (ReplayError) when a replay's watch log
    cannot be read any more."""
    from llmtop.sessions.analysis.load import analyze_sweep
    from llmtop.sessions.analysis.replay import comparison_of
    from llmtop.sessions.analysis.watch import analyze_watch
    from llmtop.sessions.reports.replay import ReplayReport
    from llmtop.sessions.reports.run import build

    kind = log.header.kind
    if kind == "watch":
        return analyze_watch(log)
    if kind != "load":
        return build(log)
    sweep = analyze_sweep(log)
    comparison = comparison_of(log)
    return sweep if comparison is None else ReplayReport(sweep, comparison)


def main(args: argparse.Namespace) -> int:
    """`llmtop report LOG`: render a session log (md, csv or json) to stdout or --out;
    returns ExitCode.OK; UsageError for an unreadable log or an unwritable --out."""
    from llmtop.sessions.records.engine_set import is_set_file
    from llmtop.sessions.records.log import LogError, read_log
    from llmtop.sessions.reports.formats import render

    refuse_out(args, [args.log_file])
    if is_set_file(args.log_file):  # `bench --engines`' set: its one comparison
        emit(_engine_set(args), args.out, "llmtop report")
        return ExitCode.OK
    try:
        # the markdown, CSV and JSON reports use no chunk: a long log is read in half the time
        lean = args.format in ("md", "csv", "json") and not getattr(args, "as_tool", None)
        log = read_log(args.log_file, chunks=not lean)
        if getattr(args, "as_tool", None):
            text = _as_tool(log, args)
        else:  # a `llmtop load` sweep gets its per-level report, a watch log its per-caller one
            text = render(_subject(log), args.format)
    except (LogError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    for warning in log.warnings[:SHOWN_WARNINGS]:
        print(f"llmtop report: {args.log_file}: {warning}", file=sys.stderr)
    if len(log.warnings) > SHOWN_WARNINGS:
        print(f"llmtop report: {args.log_file}: … {len(log.warnings) - SHOWN_WARNINGS} more bad "
              f"lines skipped ({len(log.warnings)} in all)", file=sys.stderr)
    # one way out for every command's report (output.emit): with --out it says "written to",
    # as compare and bench do (else report said nothing)
    emit(text, args.out, "llmtop report")
    return ExitCode.OK

