"""The flags more than one command shares, and the argparse types every command's flags use.

Light on purpose: `llmtop <command> --help` imports this, the command's module and the
defaults they declare, nothing that measures (tests/unit/test_cli.py,
`test_starting_imports_nothing_heavy`). Each type raises argparse.ArgumentTypeError, which
argparse prints as the usage error (exit 2) before anything starts.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from llmtop.engines.hosts import API_KEY_ENV
from llmtop.engines.timeouts import TOKEN_TIMEOUT_S, parse_token_timeout
from llmtop.sessions.measure.options import DEFAULT_OPTIONS


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


def port_list(text: str) -> list[int]:
    """Comma-separated TCP ports ("8081,9000"), or argparse.ArgumentTypeError naming the
    one that is not a port."""
    return [port_number(part.strip()) for part in text.split(",") if part.strip()]


def checked(parse: Callable[[str], object]) -> Callable[[str], object]:
    """An argparse `type` from a parser that raises ValueError (shown as the usage error)."""

    def check(text: str) -> object:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return check


def engine_flags(parser: argparse.ArgumentParser, top: bool, num_predict: bool = True) -> None:
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
    g.add_argument("--token-timeout", metavar="SECONDS", type=checked(parse_token_timeout),
                   default=d(TOKEN_TIMEOUT_S),
                   help="end a request as stalled after SECONDS without a token, however "
                   "many keep-alive pings the server sends meanwhile (default and most "
                   f"{TOKEN_TIMEOUT_S:g}: the read timeout); recorded in the log's header")
    probes_flags(g, d)
    generation_flags(parser, d, num_predict)


def generation_flags(parser: argparse.ArgumentParser, d: Callable[[object], object],
                     num_predict: bool) -> None:
    """The generation options (`DEFAULT_OPTIONS`'s), each default passed through `d` (the
    value on the top-level parser, SUPPRESS on a subcommand: `engine_flags`)."""
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


def dataset_flags(g: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """`--dataset FILE` and `--measure-cache`, the same for bench and load (the file's shapes:
    commands/datasets.py)."""
    g.add_argument("--dataset", metavar="FILE",
                   help="send the requests of FILE instead of calibrated prompts: JSONL, one "
                   "{\"prompt\"} or {\"messages\"} a line (optional max_tokens, options), or "
                   "ShareGPT {\"conversations\"} (a line each, or one JSON array); a bad line "
                   "is skipped and named; each request starts with a tag of its own so no "
                   "prefix cache serves it")
    g.add_argument("--measure-cache", action="store_true",
                   help="with --dataset, send the requests as they are: a prefix cache may "
                   "serve them")


def probes_flags(g: argparse._ArgumentGroup, d: Callable[[object], object]) -> None:
    """`--probes URL` and its token: probe samples from `llmtop agent` on the engine's machine."""
    g.add_argument("--probes", metavar="URL", default=d(None),
                   help="take the probe samples from `llmtop agent` at URL (the engine's "
                   "machine) instead of this machine")
    g.add_argument("--probes-token-file", metavar="PATH", default=d(None),
                   help="the agent's token (default: $LLMTOP_AGENT_TOKEN)")


# An engine as `llmtop engines` names it: a kind (lower-case words, dots, dashes), @port optional
_ENGINE_ITEM = re.compile(r"^[a-z][a-z0-9.-]*(@\d{1,5})?$")


def engine_items(text: str) -> tuple[str, ...]:
    """`--engines`' value: two or more comma-separated items, each a kind, kind@port or an
    http(s) URL, none twice. Raises argparse.ArgumentTypeError naming the bad item."""
    items = tuple(part.strip() for part in text.split(","))
    for item in items:
        if item.startswith(("http://", "https://")):
            if not urlsplit(item).hostname:
                raise argparse.ArgumentTypeError(f"{item!r} is a URL without a host")
        elif not _ENGINE_ITEM.match(item):
            raise argparse.ArgumentTypeError(
                f"{item!r} is not an engine: give a kind as `llmtop engines` prints it "
                "(llama-server, llmtop-embedded, ollama…), kind@port or a URL")
        elif "@" in item:  # a port as `engines --ports` takes one
            port_number(item.partition("@")[2])
    if len(items) < 2 or len(set(items)) != len(items):
        raise argparse.ArgumentTypeError(
            f"--engines needs two or more different engines, not {text!r}")
    return items
