"""`llmtop` entry point: the TUI (default), `run` (one headless request) and `engine`.

Exit codes are `llmtop.exitcodes.ExitCode` (documented in README.md).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from llmtop import __version__
from llmtop.exitcodes import ExitCode


def _engine_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("engine")
    g.add_argument(
        "--engine",
        choices=("auto", "ollama", "embedded"),
        default="auto",
        help="auto (default): Ollama if it answers within 0.5 s, else the embedded engine",
    )
    g.add_argument("--host", help="Ollama's address (default: $OLLAMA_HOST or 127.0.0.1:11434)")
    g.add_argument("--model", help="model tag (default: gemma3:270m when present, else the first installed)")
    g.add_argument("--model-path", help="GGUF file for the embedded engine (default: the bundled Gemma 3 270M)")
    g.add_argument("--via", choices=("direct", "relay"), default="direct",
                   help="stream directly (default) or through llmtop's SSE relay")
    g.add_argument("--relay", metavar="URL", help="a running relay to use with --via relay (default: start one)")
    parser.add_argument("--log", help="session log file (JSONL; default: a new file in the user data dir)")


def _generation_options(parser: argparse.ArgumentParser, num_predict_flag: str = "--num-predict") -> None:
    o = parser.add_argument_group("generation options (sent to the engine with every request)")
    o.add_argument("--temperature", type=float, default=0.0, help="default 0 (repeatable runs)")
    o.add_argument("--seed", type=int, default=42, help="default 42")
    o.add_argument("--num-ctx", type=int, default=8192, help="context tokens (default 8192)")
    if num_predict_flag == "--num-predict":
        o.add_argument("--num-predict", type=int, default=200, help="max output tokens (default 200)")


def parse_sizes(text: str) -> tuple[int, ...]:
    """"50,200,1000" → (50, 200, 1000). Raises argparse.ArgumentTypeError with the bad part."""
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 8:
            raise argparse.ArgumentTypeError(f"prompt size {part!r} is not a whole number of tokens >= 8")
        sizes.append(int(part))
    return tuple(sizes)


def port_number(text: str) -> int:
    """A TCP port 1–65535, or argparse.ArgumentTypeError saying so."""
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"port {text!r} is not a number from 1 to 65535")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    parser = argparse.ArgumentParser(
        prog="llmtop",
        description="Honest latency numbers for LLMs on your own machine. With no command: the TUI.",
    )
    parser.add_argument("--version", action="version", version=f"llmtop {__version__}")
    _engine_options(parser)
    _generation_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="stream one prompt headless and print the text and metrics")
    _engine_options(run)
    _generation_options(run)
    run.add_argument("--prompt", required=True, help="the prompt text")
    run.add_argument("--json", action="store_true", help="print one JSON object instead of text")

    bench = sub.add_parser("bench", help="the measurement protocol: warm-up, calibrated prompts, repeats, drift")
    _engine_options(bench)
    _generation_options(bench, num_predict_flag="")
    b = bench.add_argument_group("protocol")
    b.add_argument("--requests", type=int, default=25, help="measured requests per prompt size (default 25)")
    b.add_argument("--warmup", type=int, default=1, help="warm-up requests per size, kept apart (default 1)")
    b.add_argument("--prompt-tokens", type=parse_sizes, default=(200,), metavar="N[,N...]",
                   help="prompt sizes in tokens, calibrated against the server (default 200)")
    b.add_argument("--max-tokens", type=int, default=100, help="num_predict of every request (default 100)")
    b.add_argument("--think", choices=("on", "off"), help="send think true/false (default: not sent)")
    b.add_argument("--drift-threshold", type=float, default=5.0,
                   help="%% worsening first-5 → last-5 that marks the run contaminated (default 5)")
    b.add_argument("--compare-relay", action="store_true",
                   help="interleave direct and relayed requests and report the relay's TTFT overhead")
    b.add_argument("--no-cache", action="store_true", help="recalibrate even when a cached calibration exists")
    bench.add_argument("--json", action="store_true", help="print the report as one JSON object")

    b.add_argument("--require-quiet", action="store_true",
                   help="refuse to start when the preflight check finds the machine NOISY (exit 1)")
    b.add_argument("--preflight-duration", type=float, default=3.0,
                   help="seconds of machine sampling before the run (default 3; 0 skips it)")

    from llmtop.commands.preflight import add_arguments as preflight_arguments

    preflight_arguments(
        sub.add_parser("preflight", help="is this machine quiet enough to measure? exit 0 QUIET, 1 NOISY, 2 cannot check")
    )

    rep = sub.add_parser("report", help="render a session log as markdown, CSV or JSON")
    rep.add_argument("log_file", metavar="LOG", help="a session log (JSONL) written by llmtop")
    rep.add_argument("--format", choices=("md", "csv", "json"), default="md", help="default md")
    rep.add_argument("--out", help="write to FILE instead of standard output")

    rel = sub.add_parser("relay", help="serve the SSE relay and its web page in front of an Ollama-API server")
    rel.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1; anything else warns)")
    rel.add_argument("--port", type=port_number, default=8000, help="port (default 8000)")
    rel.add_argument("--upstream", help="Ollama-API URL (default: Ollama at $OLLAMA_HOST or 127.0.0.1:11434 "
                     "if it answers, else the embedded engine)")
    rel.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)

    eng = sub.add_parser("engine", help="serve the embedded engine (llama.cpp) on Ollama's API")
    eng.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    eng.add_argument("--port", type=port_number, default=11435, help="port (default 11435)")
    eng.add_argument("--model-path", help="GGUF file (default: the bundled Gemma 3 270M)")
    eng.add_argument("--model-name", help="tag to serve it under (default: gemma3:270m for the bundled model)")
    eng.add_argument("--num-ctx", type=int, default=4096, help="context when a request sets none (default 4096)")
    eng.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    return parser


def generation_options(args: argparse.Namespace) -> dict[str, object]:
    """The Ollama `options` a command sends, from its flags."""
    return {
        "temperature": args.temperature,
        "seed": args.seed,
        "num_predict": args.num_predict,
        "num_ctx": args.num_ctx,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run llmtop; returns the process exit code."""
    args = build_parser().parse_args(argv)
    if getattr(args, "relay", None) and getattr(args, "via", "direct") == "direct":
        args.via = "relay"  # naming a relay means streaming through it
    try:
        if args.command == "engine":
            from llmtop.engines.serve import serve

            return serve(args)
        if args.command == "bench":
            from llmtop.commands.bench import run_bench

            return run_bench(args)
        if args.command == "relay":
            from llmtop.relay.process import serve_relay

            return serve_relay(args)
        if args.command == "preflight":
            from llmtop.commands.preflight import run_preflight_command

            return run_preflight_command(args)
        if args.command == "report":
            from llmtop.commands.bench import run_report

            return run_report(args)
        if args.command == "run":
            from llmtop.commands.run import run_headless

            return run_headless(args)
        from llmtop.tui.app import run_tui

        return run_tui(args)
    except KeyboardInterrupt:
        print("llmtop: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:  # `llmtop … | head`: the reader left; nothing more to say
        sys.stderr.close()
        return ExitCode.OK
