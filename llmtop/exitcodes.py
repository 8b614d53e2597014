"""Process exit codes shared by every llmtop command, and their one table.

A shared basic: it imports nothing of llmtop, so every layer may use it. The one map from a
failure to an exit code is `llmtop.engines.events.exit_code_for`.

Each code's meaning is written once, as its member's docstring below, and what a stop signal
does as `ExitCode`'s. README.md's "Exit codes" and docs/reference/files.md's are rendered
from them (`markdown_table`, written by docs/gen_reference.py; tests/unit/test_exit_codes.py
fails when a copy differs).
"""

import ast
import inspect
import signal
from enum import IntEnum
from itertools import pairwise
from pathlib import Path


class ExitCode(IntEnum):
    """What an llmtop process tells its caller through its exit status (the meaning of each:
    its docstring).

    On SIGINT, SIGTERM or SIGHUP the request in flight is written to the log as cancelled,
    child engines and relays are stopped and one line names the signal (`llmtop run: stopped
    by SIGTERM`). The servers exit 0 when stopped, their normal end: `llmtop engine` and
    `llmtop relay` on any of the three, mid-generation too, within a second on an idle
    machine and a few seconds on a saturated one (2–4 s seen at a load average of 6);
    `llmtop watch` on any of the three; `llmtop agent` on SIGTERM or Ctrl+C.
    """

    OK = 0
    """The command did what was asked: the request completed, the machine is quiet."""

    NOISY = 1
    """The measurement ran, but on a noisy machine: the machine was noisy (preflight); the run
    CONTAMINATED (bench; CLEAN AFTER RE-MEASURING is 0); a level ran NOISY (load: the sweep
    CONTAMINATED, its knee not trusted); B measured slower, or the comparison is NOT
    ATTRIBUTABLE (compare: a noisy or contaminated run on either side, so "no regression"
    cannot be claimed)."""

    USAGE = 2
    """Bad command line or bad input (an empty prompt, an unwritable log, a bad model file or
    config, an unreadable file, an invalid option): nothing was measured. Preflight: it could
    not check."""

    ENGINE_UNREACHABLE = 3
    """No engine answered: Ollama is not running at the host, or the embedded engine failed to
    start."""

    MODEL_NOT_FOUND = 4
    """The engine answered but does not have the requested model (the message lists the
    installed ones)."""

    REQUEST_FAILED = 5
    """The request started but did not complete: an error mid-stream, a truncated stream, no
    generation. Bench and load: the calibration failed, or no request completed ok."""

    LOG_INCOMPLETE = 6
    """The measurement completed and its result was printed, but the session log could not be
    written to the end (disk full, a file size limit): the records before the failure are
    intact, and the message says after which record it stops."""

    INTERRUPTED = 130
    """Stopped by the user (Ctrl+C), as shells report SIGINT: 128 + 2."""

    TERMINATED = 143
    """Stopped by SIGTERM (`kill`, a service manager): `run`, `bench` and the TUI stop as on
    Ctrl+C; 128 + 15."""

    HANGUP = 129
    """Stopped by SIGHUP (the terminal closed): `run`, `bench` and the TUI stop as on Ctrl+C;
    128 + 1."""


def meanings() -> dict[ExitCode, str]:
    """Each code's meaning: its member's docstring in this file, on one line. Read from the
    source (an enum member keeps no docstring at run time); for the docs, not the hot path.
    Raises ValueError when a member has none."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ExitCode").body
    found: dict[ExitCode, str] = {}
    for node, after in pairwise(body):
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            found[ExitCode[node.targets[0].id]] = " ".join(after.value.value.split())
    missing = [code.name for code in ExitCode if code not in found]
    if missing:
        raise ValueError(f"ExitCode members without a docstring: {', '.join(missing)}")
    return found


def markdown_table() -> str:
    """The exit codes as a Markdown table (code, name, meaning), by code, then what a stop
    signal does (`ExitCode`'s docstring after its first paragraph): what README.md and
    docs/reference/files.md show under "Exit codes"."""
    rows = [f"| {code.value} | {code.name} | {text.replace('|', chr(92) + '|')} |"
            for code, text in sorted(meanings().items())]
    stops = inspect.cleandoc(ExitCode.__doc__ or "").split("\n\n", 1)[1]
    return "\n".join(["| code | name | meaning |", "|---|---|---|", *rows, "", stops]) + "\n"


# The signals that end `run`, `bench` and the TUI the way Ctrl+C does.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def signal_exit_code(signum: int) -> int:
    """The exit status a shell reports for a process ended by signal `signum`: 128 + it
    (ExitCode.TERMINATED for SIGTERM, ExitCode.HANGUP for SIGHUP)."""
    return 128 + int(signum)


class UsageError(ValueError):
    """A command line or an input the command cannot use (ExitCode.USAGE: nothing was
    measured). Raised by flag checks and config types anywhere below the CLI; `cli.main`
    reports it once, as "<label>: <message>" on stderr, and exits 2, as argparse does with
    its own errors. `label` is "llmtop <command>" unless the raise names another (a log that
    cannot be opened says "llmtop"). The message says what was wrong and what to do.

    A ValueError: a config type's refusal reaches the TUI's forms (which catch ValueError and
    show it beside the field) as it reaches the CLI."""

    def __init__(self, message: str, label: str | None = None) -> None:
        super().__init__(message)
        self.label = label
