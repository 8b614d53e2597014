"""How the TUI names a failure to connect: the header's word and the line before the message.

"Could not reach an engine" is said only when no engine answered (UNREACHABLE, TIMEOUT). When
one answered and refused — the model is not there, a bad request (a bad --model-path) — the
message `llmtop.connect` wrote is shown as the CLI shows it ("model 'gemma3:27om' not found
in the embedded engine (installed: gemma3:270m); did you mean gemma3:270m?"), after a title
that says the engine was reached.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmtop.engines.events import FailureKind


@dataclass(frozen=True, slots=True)
class ConnectFailureView:
    """header: after "llmtop · " in the header line; title: before the failure's message."""

    header: str
    title: str


_UNREACHED = ConnectFailureView("no engine", "✗ Could not reach an engine: ")
_BY_KIND = {
    FailureKind.UNREACHABLE: _UNREACHED,
    FailureKind.TIMEOUT: _UNREACHED,
    FailureKind.MODEL_NOT_FOUND: ConnectFailureView("model not found", "✗ The engine answered: "),
    FailureKind.BAD_REQUEST: ConnectFailureView("engine refused", "✗ The engine refused: "),
    FailureKind.BUSY: ConnectFailureView("engine busy", "✗ The engine is busy: "),
}


def connect_failure_view(kind: FailureKind) -> ConnectFailureView:
    """The header word and title for a connect failure of `kind`; a kind not named above
    (a server error, a protocol the client does not speak) reads "engine failed"."""
    return _BY_KIND.get(kind, ConnectFailureView("engine failed", "✗ The engine failed: "))


__all__ = ["ConnectFailureView", "connect_failure_view"]
