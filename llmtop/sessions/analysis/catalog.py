"""The saved session logs: one line each (date, engine, model, kind, requests, verdict).

Reads each log in full (read_log), so the verdict is the one `llmtop report` would give. A
log this llmtop cannot read (another format version, not a log at all) is listed with the
reason instead of being skipped, so a user sees why an old log does not open.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import platformdirs

from llmtop.sessions.analysis.compare import run_analysis
from llmtop.sessions.records.log import LogError, read_log


def sessions_folder() -> Path:
    """Where llmtop writes its logs by default (log.default_log_path's folder)."""
    return Path(platformdirs.user_data_dir("llmtop")) / "sessions"


@dataclass(frozen=True, slots=True)
class SessionEntry:
    """One saved log. started: the header's wall-clock start (ISO); kind: "session", "bench",
    "load"; requests: request records; ok: those in the statistics; verdict: the analysis
    verdict ("clean", "contaminated", "inconclusive"), or "unreadable" with `problem`."""

    path: str
    started: str | None = None
    engine: str | None = None
    model: str | None = None
    kind: str | None = None
    requests: int = 0
    ok: int = 0
    verdict: str = "unreadable"
    problem: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


def entry(path: str | os.PathLike[str]) -> SessionEntry:
    """The catalogue line of one log; never raises for a bad log (verdict "unreadable")."""
    try:
        log = read_log(path)
    except LogError as exc:
        return SessionEntry(str(path), problem=str(exc))
    h = log.header
    analysis = run_analysis(log)
    return SessionEntry(str(path), h.started_at, h.engine, h.model, h.kind, len(log.requests),
                        analysis.ok_count, analysis.verdict)


def log_files(paths: Iterable[str | os.PathLike[str]] = ()) -> list[Path]:
    """The .jsonl files named, or found in the folders named (default: `sessions_folder`),
    newest first by modification time. A missing default folder gives []."""
    found: list[Path] = []
    for p in [Path(x) for x in paths] or [sessions_folder()]:
        if p.is_dir():
            found.extend(f for f in p.glob("*.jsonl") if f.is_file())
        elif p.exists():
            found.append(p)
    return sorted(found, key=lambda f: f.stat().st_mtime, reverse=True)


def catalogue(paths: Iterable[str | os.PathLike[str]] = ()) -> list[SessionEntry]:
    """One SessionEntry per log file (see `log_files`), newest first."""
    return [entry(f) for f in log_files(paths)]
