"""`llmtop bench`: run the measurement protocol headless and print the report."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path

from llmtop.commands.connecting import connect_from_flags
from llmtop.commands.datasets import dataset_from_flags
from llmtop.commands.output import emit, out_refused
from llmtop.commands.stopping import run_stoppable
from llmtop.engines.connection import Connection
from llmtop.exitcodes import ExitCode
from llmtop.probes.config import ConfigError
from llmtop.probes.remote import probes_note
from llmtop.sessions.analysis.repeat import SizeSpread, repeatability
from llmtop.sessions.records.log import LogError, default_log_path
from llmtop.sessions.reports.formats import render
from llmtop.sessions.reports.run import build
from llmtop.sessions.reports.run_markdown import repeat_markdown
from llmtop.sessions.runners.bench import (
    BenchOutcome,
    BenchProgress,
    BenchRunner,
    NoisyMachine,
)
from llmtop.sessions.runners.bench_config import BenchConfig
from llmtop.sessions.runners.calibration import CalibrationError
from llmtop.sessions.runners.context import SUFFIX_WORDS


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    """The BenchConfig a command line asks for (the workload's flags: Workload.from_flags)."""
    return BenchConfig.from_flags(
        args,
        requests=args.requests,
        warmup=args.warmup,
        prompt_tokens=args.prompt_tokens,
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
            size = f"[{p.target} tok] " if p.target is not None else ""
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
        print(f"llmtop: {exc}", file=sys.stderr)
        return ExitCode.USAGE
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
    try:
        outcome = await runner.run()
    except CalibrationError as exc:
        print(f"llmtop bench: calibration failed: {exc}", file=sys.stderr)
        return ExitCode.REQUEST_FAILED
    except ConfigError as exc:
        print(f"llmtop bench: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except NoisyMachine as exc:
        print(
            f"llmtop bench: not started ({exc}); --require-quiet was given. Log: "
            f"{runner.log_path}",
            file=sys.stderr,
        )
        return ExitCode.NOISY
    if runs > 1:
        print(f"llmtop bench: run {k + 1}: verdict {outcome.analysis.judgement.label}",
              file=sys.stderr, flush=True)
    return runner, outcome


async def _bench(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    conn = await connect_from_flags(args, "relay" if args.compare_relay else None)
    if isinstance(conn, int):
        return conn
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
    text = render(build(outcome.log), fmt)
    spreads = repeatability([o.analysis for o in outcomes]) if runs > 1 else []
    if spreads:
        text = with_repeatability(text, fmt, spreads, [o.log_path for o in outcomes])
    if not emit(text, getattr(args, "out", None), "llmtop bench"):
        return ExitCode.USAGE
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
    incomplete = runner.recorder.log.incomplete
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


def with_repeatability(text: str, fmt: str, spreads: list[SizeSpread], logs: list[str]) -> str:
    """The last run's report with the runs' repeatability: a markdown section, a JSON key
    "repeatability"; an HTML page is left as it is (the section goes to stderr)."""
    if fmt == "json":
        data = json.loads(text)
        data["repeatability"] = {"logs": logs, "sizes": [asdict(s) for s in spreads]}
        return json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n"
    section = "\n".join(repeat_markdown(spreads, logs)) + "\n"
    if fmt == "md":
        return text + section
    print(section, file=sys.stderr)
    return text


# Below this many output tokens a request's decode rate rests on too few gaps for the drift
# rule's ±5 % (--max-tokens 10: 9 gaps, and "decode is a trend (+11 %)" of noise)
SHORT_DECODE_TOKENS = 32


def main(args: argparse.Namespace) -> int:
    """`llmtop bench`: check the flags, run the protocol, print the report; returns an
    ExitCode (0 clean, clean after re-measuring or inconclusive, 1 contaminated or refused
    as noisy, 5 nothing ok), or
    128 + the signal's number after SIGTERM/SIGHUP (`stopping.run_stoppable`)."""
    if out_refused(args, [args.log], "llmtop bench"):  # before the minutes of measuring
        return ExitCode.USAGE
    if args.requests < 1 or args.warmup < 0 or args.max_tokens < 2 or args.preflight_duration < 0:
        print("llmtop bench: --requests must be >= 1, --warmup >= 0, --max-tokens >= 2 and "
              "--preflight-duration >= 0", file=sys.stderr)
        return ExitCode.USAGE
    # a cache pair's prompt is the largest size plus a suffix of SUFFIX_WORDS words (and the
    # closing instruction's 7): 2 tokens a word bounds it for the tokenizers seen
    suffix = 2 * (SUFFIX_WORDS + 7) if args.cache_pairs else 0
    needed = max(args.prompt_tokens) + suffix + args.max_tokens
    if needed > args.num_ctx:
        print(
            f"llmtop bench: a {max(args.prompt_tokens) + suffix}-token prompt plus "
            f"{args.max_tokens} output "
            "tokens needs "
            f"{needed} tokens of context, more than --num-ctx {args.num_ctx}: raise --num-ctx (up "
            "to the "
            "model's training context) or use smaller --prompt-tokens",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    if args.max_tokens < SHORT_DECODE_TOKENS:  # said, not refused: a quick look is allowed
        print(f"llmtop bench: note: --max-tokens {args.max_tokens} gives each decode rate "
              f"{args.max_tokens - 1} gaps: the drift and trend rules on decode may call a "
              f"steady engine CONTAMINATED; use --max-tokens {SHORT_DECODE_TOKENS} or more to "
              "judge decode", file=sys.stderr)
    if getattr(args, "dataset", None) is not None:
        if args.cache_pairs or args.turns or args.compare_relay:
            print("llmtop bench: --dataset sends the file's requests; --cache-pairs, --turns "
                  "and --compare-relay need calibrated prompts: run them without --dataset",
                  file=sys.stderr)
            return ExitCode.USAGE
        dataset = dataset_from_flags(args, "llmtop bench")
        if isinstance(dataset, int):
            return dataset
        args.dataset_read = dataset
    elif getattr(args, "measure_cache", False):
        print("llmtop bench: --measure-cache applies to --dataset's requests (llmtop's own "
              "prompts are always cache-busted)", file=sys.stderr)
        return ExitCode.USAGE
    if args.require_quiet and args.preflight_duration == 0:
        print(
            "llmtop bench: --require-quiet needs a preflight check (--preflight-duration > 0)",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    return run_stoppable(_bench(args), "llmtop bench")
