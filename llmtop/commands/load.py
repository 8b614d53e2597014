"""`llmtop load`: run a concurrency or request-rate sweep headless and print its report."""

from __future__ import annotations

import argparse
import json
import sys

from llmtop.commands.connecting import connect_from_flags
from llmtop.commands.datasets import dataset_from_flags
from llmtop.commands.stopping import run_stoppable
from llmtop.exitcodes import ExitCode
from llmtop.sessions.analysis.load import verdict
from llmtop.sessions.analysis.load_verdict import verdict_line
from llmtop.sessions.analysis.saturation import describe_stop
from llmtop.sessions.records.log import LogError
from llmtop.sessions.reports.formats import render
from llmtop.sessions.reports.load import level_row
from llmtop.sessions.runners.calibration import CalibrationError
from llmtop.sessions.runners.load.config import LoadConfig, Mode
from llmtop.sessions.runners.load.progress import LoadProgress
from llmtop.sessions.runners.load.runner import LoadRunner
from llmtop.sessions.runners.replay import (
    ReplayError,
    ReplayRunner,
    Trace,
    as_json,
    markdown,
    read_trace,
    run_replay,
)

DEFAULT_CONCURRENCY = (1, 2, 4, 8)
DEFAULT_REQUESTS = 40


def config_from_args(args: argparse.Namespace) -> LoadConfig:
    """The LoadConfig a command line asks for. Raises ValueError for an impossible one."""
    mode: Mode = "rate" if args.rate else "concurrency"
    requests = args.requests if args.requests is not None or args.duration else DEFAULT_REQUESTS
    levels = args.rate or args.concurrency or DEFAULT_CONCURRENCY
    if args.search and mode == "concurrency" and len(levels) == 1 and levels[0] > 1:
        levels = (1, levels[0])  # one concurrency: the search's high bound, from 1 user
    return LoadConfig.from_flags(
        args,
        mode=mode,
        levels=levels,
        requests=requests,
        duration_s=args.duration,
        arrivals=args.arrivals,
        prompt_tokens=args.prompt_tokens,
        slo=args.slo,
        preflight_s=args.preflight_duration,
        search=args.search,
        early_stop=not args.no_early_stop,
        measure_cache=getattr(args, "measure_cache", False),
    )


def _printer(quiet: bool, config: LoadConfig):
    def show(p: LoadProgress) -> None:
        if quiet or p.phase == "request":
            return
        if p.phase == "level-done" and p.result is not None:
            cells = level_row(p.result)
            print(
                f"llmtop load: {cells[0]}: ok/failed {cells[1]} · TTFT p50/p90/p95 {cells[2]} ms"
                f" · {cells[6]} req/s · {cells[7]} tok/s · goodput {cells[8]} · probes {cells[10]}",
                file=sys.stderr,
                flush=True,
            )
            if p.result.stopped is not None:
                line = describe_stop(p.result.label, p.result.stopped)
                print(f"llmtop load: {line}", file=sys.stderr, flush=True)
            if config.search and not config.slo.empty:
                print(f"llmtop load: search: {p.result.label} {verdict(p.result).describe()}",
                      file=sys.stderr, flush=True)
        elif p.message and p.phase != "done":
            print(f"llmtop load: {p.message}", file=sys.stderr, flush=True)

    return show


async def _load(args: argparse.Namespace, config: LoadConfig) -> int:
    conn = await connect_from_flags(args)
    if isinstance(conn, int):
        return conn
    try:
        try:
            runner = LoadRunner(conn, config, args.log, on_progress=_printer(args.json, config),
                                token_timeout_s=args.token_timeout,
                                dataset=getattr(args, "dataset_read", None))
        except LogError as exc:
            print(f"llmtop: {exc}", file=sys.stderr)
            return ExitCode.USAGE
        print(
            f"llmtop load: {conn.engine.name} at {conn.engine.host} · {conn.model} · "
            f"log {runner.log_path}",
            file=sys.stderr,
            flush=True,
        )
        print(f"llmtop load: {runner.energy.line}", file=sys.stderr, flush=True)
        try:
            outcome = await runner.run()
        except CalibrationError as exc:
            print(f"llmtop load: calibration failed: {exc}", file=sys.stderr)
            return ExitCode.REQUEST_FAILED
    finally:
        await conn.close()
    if outcome.analysis.search is not None:
        print(f"llmtop load: SLO search: {outcome.analysis.search.sentence}", file=sys.stderr)
    print(render(outcome.analysis, "json" if args.json else "md"), end="")
    if not any(lv.ok for lv in outcome.analysis.levels):
        print("llmtop load: no request completed ok", file=sys.stderr)
        return ExitCode.REQUEST_FAILED
    incomplete = runner.recorder.log.incomplete
    if incomplete is not None:  # the report covers what reached the log
        print(f"llmtop load: {incomplete}; the report covers the records written", file=sys.stderr)
        return ExitCode.LOG_INCOMPLETE
    if outcome.analysis.verdict.contaminated:  # load_verdict.py: a level ran NOISY
        print(f"llmtop load: {verdict_line(outcome.analysis.verdict)}", file=sys.stderr)
        return ExitCode.NOISY
    return ExitCode.OK


async def _replay(args: argparse.Namespace, trace: Trace) -> int:
    conn = await connect_from_flags(args)
    if isinstance(conn, int):
        return conn
    try:
        try:
            runner = ReplayRunner(conn, trace, speed=args.speed, back_to_back=args.back_to_back,
                                  max_tokens=args.max_tokens, log_path=args.log,
                                  on_progress=_printer(args.json, LoadConfig()),
                                  token_timeout_s=args.token_timeout)
        except LogError as exc:
            print(f"llmtop: {exc}", file=sys.stderr)
            return ExitCode.USAGE
        print(f"llmtop load: replaying {len(trace.originals)} requests of {trace.path} on "
              f"{conn.engine.name} at {conn.engine.host} · {conn.model} · log {runner.log_path}",
              file=sys.stderr, flush=True)
        try:
            comparison, _ = await run_replay(runner)
        except CalibrationError as exc:
            print(f"llmtop load: calibration failed: {exc}", file=sys.stderr)
            return ExitCode.REQUEST_FAILED
    finally:
        await conn.close()
    if args.json:
        print(json.dumps(as_json(comparison), indent=2, ensure_ascii=False, default=str))
    else:
        print(markdown(comparison), end="")
    if not any(p.replay is not None and p.replay.status == "ok" for p in comparison.pairs):
        print("llmtop load: no replayed request completed ok", file=sys.stderr)
        return ExitCode.REQUEST_FAILED
    return ExitCode.OK


def replay_main(args: argparse.Namespace) -> int:
    """`llmtop load --replay WATCH_LOG`: read the trace, replay it, print the comparison."""
    if args.back_to_back and args.speed != 1.0:
        print("llmtop load: --speed scales the recorded gaps; --back-to-back has none",
              file=sys.stderr)
        return ExitCode.USAGE
    if getattr(args, "dataset", None) is not None:
        print("llmtop load: --replay sends the watch log's requests; --dataset another file's: "
              "give one", file=sys.stderr)
        return ExitCode.USAGE
    try:
        trace = read_trace(args.replay)
    except ReplayError as exc:
        print(f"llmtop load: --replay: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    return run_stoppable(_replay(args, trace), "llmtop load")


def main(args: argparse.Namespace) -> int:
    """`llmtop load`: check the flags, run the sweep, print the report; returns an ExitCode
    (0 done, 2 bad flags, 3/4 engine or model missing, 5 no request completed, 6 the
    log stops early; 128 + the signal after SIGTERM/SIGHUP, as run and bench)."""
    if getattr(args, "replay", None) is not None:
        return replay_main(args)
    if getattr(args, "back_to_back", False) or getattr(args, "speed", 1.0) != 1.0:
        print("llmtop load: --speed and --back-to-back apply to --replay", file=sys.stderr)
        return ExitCode.USAGE
    if (
        (args.requests is not None and args.requests < 1)
        or args.max_tokens < 2
        or args.prompt_tokens < 8
        or (args.duration is not None and args.duration <= 0)
    ):
        print(
            "llmtop load: --requests must be >= 1, --duration > 0, --max-tokens >= 2 and "
            "--prompt-tokens >= 8",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    if args.prompt_tokens + args.max_tokens > args.num_ctx:
        print(
            f"llmtop load: {args.prompt_tokens} prompt + {args.max_tokens} output tokens need more "
            f"than --num-ctx {args.num_ctx}: raise --num-ctx or lower the sizes",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"llmtop load: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    if getattr(args, "measure_cache", False) and getattr(args, "dataset", None) is None:
        print("llmtop load: --measure-cache applies to --dataset's requests (llmtop's own "
              "prompts are always cache-busted)", file=sys.stderr)
        return ExitCode.USAGE
    dataset = dataset_from_flags(args, "llmtop load")
    if isinstance(dataset, int):
        return dataset
    args.dataset_read = dataset
    return run_stoppable(_load(args, config), "llmtop load")
