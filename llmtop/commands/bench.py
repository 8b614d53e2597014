"""`llmtop bench`: run the measurement protocol headless and print the report."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from llmtop.commands.bench_end import bench_ended
from llmtop.commands.datasets import dataset_from_flags
from llmtop.commands.flags import (
    INT32_MAX,
    dataset_flags,
    engine_flags,
    engine_items,
    finite_number,
    parse_sizes,
    whole_number,
)
from llmtop.commands.output import emit, refuse_out
from llmtop.commands.stopping import run_stoppable
from llmtop.exitcodes import ExitCode, UsageError
from llmtop.sessions.measure.config import BenchConfig
from llmtop.sessions.measure.depths import depth_label, parse_depths

if TYPE_CHECKING:
    from llmtop.engines.connection import Connection
    from llmtop.sessions.analysis.repeat import SizeSpread
    from llmtop.sessions.runners.bench import BenchOutcome, BenchProgress, BenchRunner

# What running the protocol needs (httpx, pydantic, numpy and scipy through the sessions) is
# imported inside the functions that run it, so `llmtop bench --help` declares these flags
# in tens of ms (commands/__init__.py).


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`llmtop bench`'s flags: the engine's and generation's, the protocol's (sizes, counts,
    the drift rule, re-measuring, repeats, the inputs), and where the report goes. Defaults
    are BenchConfig's."""
    bench = BenchConfig()
    engine_flags(p, top=False, num_predict=False)
    b = p.add_argument_group("protocol")
    _sweep_flags(b, bench)
    _remeasure_flags(b, bench)
    _input_flags(b, bench)
    p.add_argument("--engines", type=engine_items, default=None, metavar="A,B[,...]",
                   help="measure several engines in one run, their requests interleaved in "
                   "rounds (the order rotated each round), the same prompts to each: kinds as "
                   "`llmtop engines` prints them (llama-server, llmtop-embedded, ollama…), "
                   "kind@port or URLs; one log per engine and one report comparing them "
                   "(docs/guide/engines.md)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--format", choices=("md", "json", "html"), default=None,
                   help="the report's format (default md; --json is --format json); html: one "
                   "self-contained file with plots")
    p.add_argument("--out", metavar="FILE",
                   help="write the report to FILE instead of standard output")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out file that is not an llmtop report")


def _sweep_flags(b: argparse._ArgumentGroup, bench: BenchConfig) -> None:
    """The sweep's counts and sizes, the cache pairs and turns after it, the drift rule."""
    b.add_argument("--requests", type=whole_number(1, 1_000_000), default=bench.requests,
                   help=f"measured requests per prompt size (default {bench.requests})")
    b.add_argument("--warmup", type=whole_number(0, 1_000_000), default=bench.warmup,
                   help=f"warm-up requests per size, kept apart (default {bench.warmup})")
    sizes = b.add_mutually_exclusive_group()
    sizes.add_argument("--prompt-tokens", type=parse_sizes, default=bench.prompt_tokens,
                       metavar="N[,N...]", help="prompt sizes in tokens, calibrated against the "
                       f"server (default {','.join(map(str, bench.prompt_tokens))})")
    sizes.add_argument("--depths", type=parse_depths, default=None, metavar="D[,D...]",
                       help="a context-depth sweep: per depth, a fresh (cache-busted) context "
                       "of D tokens, then prefill and decode measured after it, with "
                       "intervals; tokens as llama-bench's -d, k = 1024 (1k,4k,16k); a depth "
                       "must fit the engine's context (--num-ctx, llama-server's -c)")
    b.add_argument("--max-tokens", type=whole_number(2, INT32_MAX), default=bench.max_tokens,
                   help=f"num_predict of every request (default {bench.max_tokens})")
    b.add_argument("--cache-pairs", type=whole_number(0, 10_000), default=bench.cache_pairs,
                   metavar="N", help="after the sweep, N prefix-cache pairs (a fresh prefix of "
                   "the largest size, then the same prefix with a new suffix): cached tokens and "
                   "the prefill saved per cached token (default 0)")
    b.add_argument("--turns", type=whole_number(0, 10_000), default=bench.turns, metavar="N",
                   help="after the sweep, an N-turn conversation (each turn sends the whole "
                   "history; messages of the smallest size): TTFT and prefill per turn against "
                   "the curve, then the same turns replayed with the engine's cache defeated "
                   "(default 0)")
    b.add_argument("--no-cold-turns", action="store_true",
                   help="with --turns, skip the replay with the cache defeated (half the "
                   "requests; no cache saving per turn)")
    b.add_argument("--no-save-curve", action="store_true",
                   help="do not save this sweep's prefill curve as this model's (the TUI's "
                   "prefill prediction and the next bench's check read it)")
    b.add_argument(
        "--think", choices=("on", "off"), help="send think true/false (default: not sent)"
    )
    b.add_argument(
        "--drift-threshold",
        type=finite_number(0.0, above_low=True),
        default=bench.drift_threshold_pct,
        help="%% change first-5 → last-5 baseline requests, either way, that marks the run "
        "contaminated; also the smallest slow episode "
        f"(default {bench.drift_threshold_pct:g})",
    )


def _remeasure_flags(b: argparse._ArgumentGroup, bench: BenchConfig) -> None:
    """Re-measuring around slow episodes, and the repeated runs of --runs."""
    b.add_argument(
        "--remeasure-budget",
        type=whole_number(0, 1_000_000),
        default=None,
        metavar="N",
        help="extra requests per prompt size to re-measure around slow episodes (default: "
        "--requests, twice the protocol's count in all; 0 turns re-measuring off)",
    )
    b.add_argument("--no-remeasure", action="store_true",
                   help="never re-measure: episodes leave the baseline short (CONTAMINATED)")
    b.add_argument(
        "--remeasure-pause",
        type=finite_number(0.0, 3600.0),
        default=bench.remeasure_pause_s,
        metavar="S",
        help=f"seconds to wait before re-measuring (default {bench.remeasure_pause_s:g})",
    )
    b.add_argument("--runs", type=whole_number(1, 1000), default=1, metavar="K",
                   help="K independent runs, a cool-down between them, the engine kept loaded: "
                   "the spread of their baseline medians and a 95 %% confidence interval "
                   "(default 1)")
    b.add_argument("--cool-down", type=finite_number(0.0, 3600.0), default=30.0, metavar="S",
                   help="seconds between runs of --runs (default 30)")


def _input_flags(b: argparse._ArgumentGroup, bench: BenchConfig) -> None:
    """What is sent (calibrated prompts, a dataset, the relay beside), and the preflight."""
    b.add_argument(
        "--compare-relay",
        action="store_true",
        help="interleave direct and relayed requests and report the relay's TTFT overhead",
    )
    b.add_argument("--no-cache", action="store_true",
                   help="recalibrate even when a cached calibration exists")
    dataset_flags(b)
    b.add_argument("--require-quiet", action="store_true",
                   help="refuse to start when the preflight check finds the machine NOISY (exit 1)")
    b.add_argument(
        "--preflight-duration",
        type=finite_number(0.0, 86_400.0),
        default=bench.preflight_s,
        help=f"seconds of machine sampling before the run (default {bench.preflight_s:g}; "
        "0 skips it)",
    )


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    """The BenchConfig a command line asks for (the workload's flags: Workload.from_flags)."""
    return BenchConfig.from_flags(
        args,
        requests=args.requests,
        warmup=args.warmup,
        prompt_tokens=args.depths or args.prompt_tokens,
        depths=args.depths,
        drift_threshold_pct=args.drift_threshold,
        preflight_s=args.preflight_duration,
        require_quiet=args.require_quiet,
        compare_relay=args.compare_relay,
        cache_pairs=args.cache_pairs,
        turns=args.turns,
        cold_turns=not args.no_cold_turns,
        save_curve=not args.no_save_curve,
        remeasure_budget=0 if args.no_remeasure else args.remeasure_budget,
        remeasure_pause_s=args.remeasure_pause,
        measure_cache=getattr(args, "measure_cache", False),
    )


def _progress_printer(quiet: bool, config: BenchConfig):
    def show(p: BenchProgress) -> None:
        if quiet:
            return
        if p.result is not None and p.record is not None:
            m = p.result.metrics
            ttft = "n/a" if m.ttft_ms is None else f"{m.ttft_ms:.1f} ms"
            rate = "n/a" if m.server_decode_tps is None else f"{m.server_decode_tps:.1f} tok/s"
            size = "" if p.target is None else (
                f"[depth {depth_label(p.target)}] " if config.depths else f"[{p.target} tok] ")
            # "warm-up 1/1", "request 3/10"; a cache pair's or a turn's own count
            where = (config.position(p.phase, p.done - 1) if p.phase in ("warmup", "measure")
                     else f"{p.phase} {p.done}/{p.total}")
            print(
                f"{size}{where}: {p.result.status} · TTFT {ttft} · "
                f"decode {rate}",
                file=sys.stderr,
                flush=True,
            )
        elif p.message and p.phase in ("environment", "preflight", "calibrating", "warmup",
                                       "remeasure"):
            print(f"llmtop bench: {p.message}", file=sys.stderr, flush=True)
    return show


async def _one_run(
    args: argparse.Namespace, conn: Connection, config: BenchConfig, k: int, runs: int
) -> tuple[BenchRunner, BenchOutcome] | int:
    """Run k (0-based) of `runs`: its runner and outcome, or the ExitCode it failed with."""
    import asyncio

    from llmtop.probes.remote import probes_note
    from llmtop.sessions.records.log import LogError
    from llmtop.sessions.runners.bench import BenchRunner

    if k:
        print(f"llmtop bench: run {k} of {runs} done; cooling down {args.cool_down:g} s "
              "(the engine stays loaded)", file=sys.stderr, flush=True)
        await asyncio.sleep(args.cool_down)
    try:
        if runs > 1:
            config = replace(config, run=k + 1, runs=runs)
        runner = BenchRunner(conn, config, run_log(args.log, k, runs),
                             on_progress=_progress_printer(args.json, config),
                             agent=getattr(args, "agent", None),
                             token_timeout_s=args.token_timeout,
                             dataset=getattr(args, "dataset_read", None))
    except LogError as exc:
        raise UsageError(str(exc), label="llmtop") from None
    print(
        f"llmtop bench: {conn.engine.name} at {conn.engine.host} · {conn.model} · log "
        f"{runner.log_path}" + (f" (run {k + 1} of {runs})" if runs > 1 else ""),
        file=sys.stderr,
        flush=True,
    )
    note = probes_note(getattr(args, "agent", None), conn.upstream.host)
    if note and k == 0:
        print(f"llmtop bench: {note}", file=sys.stderr, flush=True)
    if k == 0:
        print(f"llmtop bench: {runner.energy.line}", file=sys.stderr, flush=True)
    outcome = await bench_ended(runner.run(), f"Log: {runner.log_path}")
    if isinstance(outcome, int):
        return outcome
    if runs > 1:
        print(f"llmtop bench: run {k + 1}: verdict {outcome.analysis.judgement.label}",
              file=sys.stderr, flush=True)
    return runner, outcome


async def _bench(args: argparse.Namespace) -> int:
    from llmtop.commands.connecting import connect_from_flags
    from llmtop.sessions.analysis.repeat import repeatability
    from llmtop.sessions.records.log import default_log_path
    from llmtop.sessions.reports.formats import render
    from llmtop.sessions.reports.run import Repeatability, build

    config = config_from_args(args)
    conn = await connect_from_flags(args, "relay" if args.compare_relay else None)
    if isinstance(conn, int):
        return conn
    if getattr(args, "depths", None):
        await refuse_depths(conn, args)
    runs: int = getattr(args, "runs", 1)
    if runs > 1 and args.log is None:  # one stem for the set, so `compare` finds its runs
        args.log = str(default_log_path("bench"))
    outcomes = []
    try:
        for k in range(runs):
            done = await _one_run(args, conn, config, k, runs)
            if isinstance(done, int):
                return done
            runner, outcome = done
            outcomes.append(outcome)
        for note in getattr(conn.engine, "notes", ()):  # options the engine could not send
            print(f"llmtop bench: note: {note}", file=sys.stderr)
    finally:
        await conn.close()
    fmt = getattr(args, "format", None) or ("json" if args.json else "md")
    spreads = repeatability([o.analysis for o in outcomes]) if runs > 1 else []
    spread = Repeatability(spreads, [o.log_path for o in outcomes]) if spreads else None
    # the run's own analysis: the report analyses nothing again; the runs' spread is a
    # section of the markdown and the page, a key of the JSON
    text = render(build(outcome.log, outcome.analysis, spread), fmt)
    emit(text, getattr(args, "out", None), "llmtop bench")
    return _said(outcomes, spreads, runner.recorder.log.incomplete)


def _said(outcomes: list[BenchOutcome], spreads: list[SizeSpread],
          incomplete: str | None) -> int:
    """Say the bench's end on stderr (runs that disagree, too few requests, an incomplete
    log, no request ok, the verdict) and return its ExitCode: NOISY for runs that disagree or
    a CONTAMINATED verdict, REQUEST_FAILED with no ok request, LOG_INCOMPLETE, else OK."""
    outcome = outcomes[-1]
    if any(sp.disagree for size in spreads for sp in size.spreads) or any(
            o.analysis.contaminated for o in outcomes[:-1]):
        print("llmtop bench: the runs do not agree (see \"Repeatability\"), or an earlier "
              "run was CONTAMINATED", file=sys.stderr)
        return ExitCode.NOISY
    if outcome.analysis.verdict == "inconclusive":
        print(
            "llmtop bench: verdict INCONCLUSIVE: drift needs at least 10 ok requests per prompt "
            "size "
            "(--requests 10 or more)",
            file=sys.stderr,
        )
    if incomplete is not None:  # the report covers what reached the log
        print(f"llmtop bench: {incomplete}; the report covers the records written",
              file=sys.stderr)
    if outcome.analysis.ok_count == 0:
        print("llmtop bench: no request completed ok; see the excluded requests", file=sys.stderr)
        return ExitCode.REQUEST_FAILED
    judgement = outcome.analysis.judgement
    if judgement.word != "inconclusive":
        why = "".join(f"\n  {r}" for r in judgement.reasons)
        print(f"llmtop bench: verdict {judgement.label}{why}", file=sys.stderr)
    if judgement.contaminated:
        return ExitCode.NOISY
    return ExitCode.LOG_INCOMPLETE if incomplete is not None else ExitCode.OK


def run_log(log: str | None, k: int, runs: int) -> str | None:
    """The log of run k (0-based) of `runs`: --log itself for one run; else --log with
    "-run<k+1>" before its suffix (None: a new default file each run)."""
    if log is None or runs == 1:
        return log
    path = Path(log)
    return str(path.with_name(f"{path.stem}-run{k + 1}{path.suffix}"))


# Below this many output tokens a request's decode rate rests on too few gaps for the drift
# rule's ±5 % (--max-tokens 10: 9 gaps, and "decode is a trend (+11 %)" of noise)
SHORT_DECODE_TOKENS = 32


def main(args: argparse.Namespace) -> int:
    """`llmtop bench`: check the flags, run the protocol, print the report; returns an
    ExitCode (0 clean, clean after re-measuring or inconclusive, 1 contaminated or refused
    as noisy, 5 nothing ok), or
    128 + the signal's number after SIGTERM/SIGHUP (`stopping.run_stoppable`). Raises
    UsageError for flags that cannot run (`check_flags`)."""
    check_flags(args)
    if args.max_tokens < SHORT_DECODE_TOKENS:  # said, not refused: a quick look is allowed
        print(f"llmtop bench: note: --max-tokens {args.max_tokens} gives each decode rate "
              f"{args.max_tokens - 1} gaps: the drift and trend rules on decode may call a "
              f"steady engine CONTAMINATED; use --max-tokens {SHORT_DECODE_TOKENS} or more to "
              "judge decode", file=sys.stderr)
    if getattr(args, "dataset", None) is not None:
        if getattr(args, "depths", None):
            raise UsageError("--dataset sends the file's requests; --depths sends contexts "
                             "of its own: give one of them")
        if args.cache_pairs or args.turns or args.compare_relay:
            raise UsageError("--dataset sends the file's requests; --cache-pairs, --turns and "
                             "--compare-relay need calibrated prompts: run them without "
                             "--dataset")
        args.dataset_read = dataset_from_flags(args, "llmtop bench")
    elif getattr(args, "measure_cache", False):
        raise UsageError("--measure-cache applies to --dataset's requests (llmtop's own "
                         "prompts are always cache-busted)")
    if args.require_quiet and args.preflight_duration == 0:
        raise UsageError("--require-quiet needs a preflight check (--preflight-duration > 0)")
    if getattr(args, "engines", None):
        from llmtop.commands import bench_engines

        return bench_engines.main(args, config_from_args(args))
    return run_stoppable(_bench(args), "llmtop bench")


def check_flags(args: argparse.Namespace) -> None:
    """Raise UsageError, before the minutes of measuring, for an --out that must not be
    written, counts out of range, or sizes that do not fit the context (--num-ctx)."""
    from llmtop.sessions.runners.context import SUFFIX_WORDS

    refuse_out(args, [args.log])
    if args.requests < 1 or args.warmup < 0 or args.max_tokens < 2 or args.preflight_duration < 0:
        raise UsageError("--requests must be >= 1, --warmup >= 0, --max-tokens >= 2 and "
                         "--preflight-duration >= 0")
    # a cache pair's prompt is the largest size plus a suffix of SUFFIX_WORDS words (and the
    # closing instruction's 7): 2 tokens a word bounds it for the tokenizers seen
    suffix = 2 * (SUFFIX_WORDS + 7) if args.cache_pairs else 0
    if getattr(args, "depths", None):  # the engine's own context decides (refuse_depths)
        return
    needed = max(args.prompt_tokens) + suffix + args.max_tokens
    if needed > args.num_ctx:
        raise UsageError(
            f"a {max(args.prompt_tokens) + suffix}-token prompt plus {args.max_tokens} output "
            f"tokens needs {needed} tokens of context, more than --num-ctx {args.num_ctx}: "
            "raise --num-ctx (up to the model's training context) or use smaller "
            "--prompt-tokens")


async def refuse_depths(conn: Connection, args: argparse.Namespace) -> None:
    """Raise UsageError, after connecting and before any request, when the deepest of
    --depths with --max-tokens after it does not fit the engine's context
    (measure/depths.context_limit: llama-server's /props n_ctx, the model's context, or
    --num-ctx capped by the model's training context); the connection is closed first."""
    from llmtop.sessions.measure.depths import context_limit, depth_refusal

    info = conn.info
    limit = context_limit(conn.upstream.name, conn.engine_config,
                          info.context_length if info else None,
                          info.model_info if info else {}, args.num_ctx)
    refusal = None if limit is None else depth_refusal(args.depths, args.max_tokens, limit)
    if refusal is not None:
        await conn.close()
        raise UsageError(refusal)
