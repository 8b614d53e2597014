"""Process exit codes shared by every llmtop command (documented in README.md).

A shared basic: it imports nothing of llmtop, so every layer may use it. The one map from a
failure to an exit code is `llmtop.engines.events.exit_code_for`.
"""

import signal
from enum import IntEnum


class ExitCode(IntEnum):
    """What an llmtop process tells its caller through its exit status."""

    OK = 0
    """The command did what was asked (a request completed; the machine is quiet)."""

    NOISY = 1
    """The measurement ran but the machine was noisy or the run contaminated."""

    USAGE = 2
    """Bad command line or bad input (unreadable file, invalid option); nothing was measured."""

    ENGINE_UNREACHABLE = 3
    """No engine answered: Ollama is not running at the host, or the embedded engine failed to
    start."""

    MODEL_NOT_FOUND = 4
    """The engine answered but does not have the requested model."""

    REQUEST_FAILED = 5
    """The request started but did not complete: an error mid-stream, a truncated stream, no
    generation."""

    LOG_INCOMPLETE = 6
    """The measurement completed and its result was printed, but the session log could not be
    written to the end (disk full, a file size limit): the records before the failure are
    intact, and the message says where the log stops."""

    INTERRUPTED = 130
    """Stopped by the user (Ctrl+C), as shells report SIGINT."""

    TERMINATED = 143
    """Stopped by SIGTERM (`kill`, a service manager), handled as Ctrl+C: 128 + 15."""

    HANGUP = 129
    """Stopped by SIGHUP (the terminal closed), handled as Ctrl+C: 128 + 1."""


# The signals that end `run`, `bench` and the TUI the way Ctrl+C does.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def signal_exit_code(signum: int) -> int:
    """The exit status a shell reports for a process ended by signal `signum`: 128 + it
    (ExitCode.TERMINATED for SIGTERM, ExitCode.HANGUP for SIGHUP)."""
    return 128 + int(signum)

