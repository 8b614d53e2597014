"""`llmtop load`: run a concurrency or request-rate sweep headless and print its report."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from llmtop.commands.datasets import dataset_from_flags
from llmtop.commands.flags import checked, dataset_flags, engine_flags, finite_number
from llmtop.commands.stopping import run_stoppable
from llmtop.exitcodes import ExitCode, UsageError
from llmtop.sessions.measure.config import BenchConfig, LoadConfig, Mode
from llmtop.sessions.measure.slo import Slo
from llmtop.sessions.runners.load.config import parse_level_duration, parse_levels

if TYPE_CHECKING:
    from llmtop.sessions.analysis.replay import Trace
    from llmtop.sessions.runners.load.progress import LoadProgress

DEFAULT_CONCURRENCY = (1, 2, 4, 8)
DEFAULT_REQUESTS = 40


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`llmtop load`'s flags: the engine's, the sweep's (levels, sizes, SLO), --replay's."""
    BENCH = BenchConfig()
    engine_flags(p, top=False, num_predict=False)
    s = p.add_argument_group("sweep (closed loop by --concurrency, or open loop by --rate)")
    levels = s.add_mutually_exclusive_group()
    levels.add_argument("--concurrency", type=checked(lambda t: parse_levels(t, True)),
                        metavar="N[,N...]",
                        help="closed loop: N users, each sends when its last request ends "
                        "(default 1,2,4,8)")
    levels.add_argument("--rate", type=checked(lambda t: parse_levels(t, False)),
                        metavar="R[,R...]",
                        help="open loop: requests/s on a timetable, whatever the engine does")
    s.add_argument("--arrivals", choices=("poisson", "constant"), default="poisson",
                   help="open loop's timetable (default poisson, seeded by --seed)")
    size = s.add_mutually_exclusive_group()
    size.add_argument("--requests", type=int, help="requests per level (default 40)")
    size.add_argument("--duration", type=checked(parse_level_duration),
                      metavar="TIME", help="time per level instead, e.g. 60s or 2m (at most 24h)")
    s.add_argument("--prompt-tokens", type=int, default=BENCH.prompt_tokens[0],
                   help=f"calibrated prompt size (default {BENCH.prompt_tokens[0]})")
    s.add_argument("--max-tokens", type=int, default=BENCH.max_tokens,
                   help=f"num_predict of every request (default {BENCH.max_tokens})")
    s.add_argument("--slo", type=checked(Slo.parse), default=Slo(), metavar="TERMS",
                   help="latency target for goodput, e.g. ttft=500ms,tpot=50ms,e2e=10s")
    s.add_argument("--search", action="store_true",
                   help="SLO search: bisect between the lowest and highest level for the "
                   "highest one meeting --slo (each point repeated until its 95%% CI decides)")
    s.add_argument("--no-early-stop", action="store_true",
                   help="run an open-loop level to its end even once its latency grows "
                   "without bound (default: stop it, and say so)")
    s.add_argument("--think", choices=("on", "off"),
                   help="send think true/false (default: not sent)")
    s.add_argument("--no-cache", action="store_true", help="recalibrate even when cached")
    dataset_flags(s)
    s.add_argument("--replay", metavar="WATCH_LOG",
                   help="send the requests a `llmtop watch` log recorded, at their recorded "
                   "arrival gaps (open loop), and compare each with its original")
    s.add_argument("--speed", type=finite_number(0.0, 1000.0, above_low=True), default=1.0,
                   help="with --replay, play the recorded gaps this many times faster "
                   "(default 1)")
    s.add_argument("--back-to-back", action="store_true",
                   help="with --replay, send each request when the one before it ended")
    s.add_argument("--preflight-duration", type=float, default=0.0,
                   help="seconds of machine sampling before the sweep (default 0: none)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")


def config_from_args(args: argparse.Namespace) -> LoadConfig:
    """The LoadConfig a command line asks for. Raises UsageError (LoadConfig's) for an
    impossible one."""
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


def _printer(quiet: bool, config: LoadConfig, label: str | None = None):
    """The progress lines on stderr; `label` names the level in them (a replay's, as its
    report does: reports/load.replay_name) instead of its users or req/s."""
    from llmtop.sessions.analysis.load import verdict
    from llmtop.sessions.analysis.saturation import describe_stop
    from llmtop.sessions.reports.load import level_row

    def show(p: LoadProgress) -> None:
        if quiet or p.phase == "request":
            return
        if p.phase == "level-done" and p.result is not None:
            cells = level_row(p.result)
            print(
                f"llmtop load: {label or cells[0]}: ok/failed {cells[1]} · TTFT p50/p90/p95 "
                f"{cells[2]} ms · {cells[6]} req/s · {cells[7]} tok/s · goodput {cells[8]} · "
                f"probes {cells[10]}",
                file=sys.stderr,
                flush=True,
            )
            if p.result.stopped is not None:
                line = describe_stop(p.result.label, p.result.stopped)
                print(f"llmtop load: {line}", file=sys.stderr, flush=True)
            if config.search and not config.slo.empty:
                print(f"llmtop load: search: {p.result.label} {verdict(p.result).describe()}",
                      file=sys.stderr, flush=True)
        elif label is not None and p.phase == "level":  # the replay's one level, by its pace
            print(f"llmtop load: {label}: {p.total} requests", file=sys.stderr, flush=True)
        elif p.message and p.phase != "done":
            print(f"llmtop load: {p.message}", file=sys.stderr, flush=True)

    return show


async def _load(args: argparse.Namespace, config: LoadConfig) -> int:
    from llmtop.commands.connecting import connect_from_flags
    from llmtop.sessions.analysis.load_verdict import verdict_line
    from llmtop.sessions.records.log import LogError
    from llmtop.sessions.reports.formats import render
    from llmtop.sessions.runners.calibration import CalibrationError
    from llmtop.sessions.runners.load.runner import LoadRunner

    conn = await connect_from_flags(args)
    if isinstance(conn, int):
        return conn
    try:
        try:
            runner = LoadRunner(conn, config, args.log, on_progress=_printer(args.json, config),
                                token_timeout_s=args.token_timeout,
                                dataset=getattr(args, "dataset_read", None))
        except LogError as exc:
            raise UsageError(str(exc), label="llmtop") from None
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
    from llmtop.commands.connecting import connect_from_flags
    from llmtop.sessions.records.log import LogError
    from llmtop.sessions.reports.load import replay_name
    from llmtop.sessions.reports.replay import json_text, markdown
    from llmtop.sessions.runners.calibration import CalibrationError
    from llmtop.sessions.runners.replay import ReplayRunner, run_replay

    conn = await connect_from_flags(args)
    if isinstance(conn, int):
        return conn
    try:
        try:
            runner = ReplayRunner(conn, trace, speed=args.speed, back_to_back=args.back_to_back,
                                  max_tokens=args.max_tokens, log_path=args.log,
                                  on_progress=_printer(args.json, LoadConfig(), replay_name(
                                      args.back_to_back, args.speed)),
                                  token_timeout_s=args.token_timeout)
        except LogError as exc:
            raise UsageError(str(exc), label="llmtop") from None
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
        print(json_text(comparison), end="")
    else:
        print(markdown(comparison), end="")
    if not any(p.replay is not None and p.replay.status == "ok" for p in comparison.pairs):
        print("llmtop load: no replayed request completed ok", file=sys.stderr)
        return ExitCode.REQUEST_FAILED
    return ExitCode.OK


def _sweep_flags_given(args: argparse.Namespace) -> list[str]:
    """The sweep's flags set away from their defaults, which a replay cannot honour: its one
    level is the recorded requests at their recorded pace (their count, prompts and options
    the watch log's, options included), so a level, a size, a timetable, an SLO, a search or
    a generation option would be ignored."""
    from llmtop.sessions.measure.options import DEFAULT_OPTIONS

    given = {
        "--concurrency": args.concurrency is not None, "--rate": args.rate is not None,
        "--arrivals": args.arrivals != "poisson", "--requests": args.requests is not None,
        "--duration": args.duration is not None,
        "--prompt-tokens": args.prompt_tokens != BenchConfig().prompt_tokens[0],
        "--slo": not args.slo.empty, "--search": args.search,
        "--no-early-stop": args.no_early_stop, "--think": args.think is not None,
        "--no-cache": args.no_cache, "--preflight-duration": args.preflight_duration != 0.0,
        "--measure-cache": getattr(args, "measure_cache", False),
        "--temperature": args.temperature != DEFAULT_OPTIONS.temperature,
        "--seed": args.seed != DEFAULT_OPTIONS.seed,
        "--num-ctx": args.num_ctx != DEFAULT_OPTIONS.num_ctx,
        "--num-thread": getattr(args, "num_thread", None) is not None,
    }
    return [flag for flag, set_ in given.items() if set_]


def replay_main(args: argparse.Namespace) -> int:
    """`llmtop load --replay WATCH_LOG`: read the trace, replay it, print the comparison.
    Raises UsageError for flags --replay does not take and a trace that cannot be read."""
    from llmtop.sessions.analysis.replay import ReplayError, read_trace

    if args.back_to_back and args.speed != 1.0:
        raise UsageError("--speed scales the recorded gaps; --back-to-back has none")
    if getattr(args, "dataset", None) is not None:
        raise UsageError("--replay sends the watch log's requests; --dataset another file's: "
                         "give one")
    refused = _sweep_flags_given(args)
    if refused:  # silently ignored, they would report a run that did not happen
        raise UsageError(f"--replay sends the watch log's requests once, with their recorded "
                         "prompts and options, at their recorded gaps / --speed or "
                         f"--back-to-back: {', '.join(refused)} cannot apply to it; drop them "
                         "(or run a sweep without --replay)")
    try:
        trace = read_trace(args.replay)
    except ReplayError as exc:
        raise UsageError(f"--replay: {exc}") from None
    return run_stoppable(_replay(args, trace), "llmtop load")


def main(args: argparse.Namespace) -> int:
    """`llmtop load`: check the flags, run the sweep, print the report; returns an ExitCode
    (0 done, 2 bad flags, 3/4 engine or model missing, 5 no request completed, 6 the
    log stops early; 128 + the signal after SIGTERM/SIGHUP, as run and bench); raises
    UsageError for flags that do not go together."""
    if getattr(args, "replay", None) is not None:
        return replay_main(args)
    if getattr(args, "back_to_back", False) or getattr(args, "speed", 1.0) != 1.0:
        raise UsageError("--speed and --back-to-back apply to --replay")
    if (
        (args.requests is not None and args.requests < 1)
        or args.max_tokens < 2
        or args.prompt_tokens < 8
        or (args.duration is not None and args.duration <= 0)
    ):
        raise UsageError("--requests must be >= 1, --duration > 0, --max-tokens >= 2 and "
                         "--prompt-tokens >= 8")
    if args.prompt_tokens + args.max_tokens > args.num_ctx:
        raise UsageError(f"{args.prompt_tokens} prompt + {args.max_tokens} output tokens need "
                         f"more than --num-ctx {args.num_ctx}: raise --num-ctx or lower the "
                         "sizes")
    config = config_from_args(args)
    if getattr(args, "measure_cache", False) and getattr(args, "dataset", None) is None:
        raise UsageError("--measure-cache applies to --dataset's requests (llmtop's own "
                         "prompts are always cache-busted)")
    args.dataset_read = dataset_from_flags(args, "llmtop load")
    return run_stoppable(_load(args, config), "llmtop load")
