"""The session log: versioned JSONL, one record per line, flushed as each record is written.

Record types (field `type`):
* "header": first line. `format` (FORMAT_VERSION), `llmtop_version`, `engine`, `host`, `model`,
  `model_details`, `options`, `environment` (OS/CPU/RAM), `started_at` (wall-clock label).
* "request": prompt, options, status, error, the server's stats (Ollama names, ns), derived
  metrics (ms, tokens/s), and `chunks`: [[offset_ns from send, content, thinking], ...].
* "probe": one probe sample (see llmtop.probes), with the id of the request it overlapped.
* "end": `ended_at`, written when a session closes cleanly.

A crash loses at most the line being written: every record is flushed (and fsync'd) on write,
and the reader skips a torn last line, saying so.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import platformdirs

from llmtop import __version__
from llmtop.sessions.request import RequestResult

FORMAT_VERSION = 1
SUPPORTED_FORMATS = (1,)


class LogError(Exception):
    """A session log that cannot be written or read; the message says which file and why."""


def default_log_path(kind: str = "session") -> Path:
    """A new file in the user data directory: <data>/llmtop/sessions/<kind>-<timestamp>.jsonl."""
    folder = Path(platformdirs.user_data_dir("llmtop")) / "sessions"
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    return folder / f"{kind}-{stamp}.jsonl"


def request_record(result: RequestResult) -> dict[str, Any]:
    """The JSON record of one finished request (chunk stamps as offsets from the send, ns)."""
    return {
        "type": "request",
        "id": result.request_id,
        "started_at": result.wall_start,
        "model": result.model,
        "prompt": result.prompt,
        "options": result.options,
        "status": str(result.status),
        "error": str(result.failure) if result.failure else None,
        "error_kind": str(result.failure.kind) if result.failure else None,
        "stats": result.stats.to_dict() if result.stats else None,
        "metrics": result.metrics.to_dict(),
        "content": result.content,
        "thinking": result.thinking,
        "chunks": [[e.t_ns - result.sent_ns, e.content, e.thinking] for e in result.events if not e.done or e.has_text],
    }


class SessionLog:
    """Append-only writer. Opening writes the header; each `write_*` flushes and fsyncs.

    Raises LogError when the file cannot be created or written (with the path and the reason).
    """

    def __init__(self, path: str | os.PathLike[str], header: dict[str, Any]) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh: IO[str] | None = self.path.open("a", encoding="utf-8")
            self._lock = threading.Lock()  # probe samples arrive from the sampler thread
        except OSError as exc:
            raise LogError(f"cannot write the session log {self.path}: {exc.strerror or exc}") from exc
        self.write(
            {
                "type": "header",
                "format": FORMAT_VERSION,
                "llmtop_version": __version__,
                "started_at": datetime.now().astimezone().isoformat(),
                **header,
            }
        )

    def write(self, record: dict[str, Any]) -> None:
        """Append one record as one line, flushed to disk before returning."""
        line = json.dumps(record, ensure_ascii=False, default=str)
        try:
            with self._lock:
                if self._fh is None:
                    raise LogError(f"the session log {self.path} is closed")
                self._fh.write(line + "\n")
                self._fh.flush()
                os.fsync(self._fh.fileno())
        except OSError as exc:
            raise LogError(f"cannot write the session log {self.path}: {exc.strerror or exc}") from exc

    def write_request(self, result: RequestResult) -> None:
        """Append a finished request."""
        self.write(request_record(result))

    def write_probe(self, sample: dict[str, Any], request_id: int | None) -> None:
        """Append a probe sample (already JSON-ready), tagged with the overlapping request."""
        self.write({"type": "probe", "request_id": request_id, **sample})

    def close(self) -> None:
        """Write the end record and close. Safe to call twice."""
        if self._fh is None:
            return
        try:
            self.write({"type": "end", "ended_at": datetime.now().astimezone().isoformat()})
        finally:
            self._fh.close()
            self._fh = None


@dataclass
class LoadedLog:
    """A session log read back: the header, the records after it, and any problem lines."""

    header: dict[str, Any]
    records: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def of_type(self, kind: str) -> Iterator[dict[str, Any]]:
        """The records of one type, in file order."""
        return (r for r in self.records if r.get("type") == kind)


def read_log(path: str | os.PathLike[str]) -> LoadedLog:
    """Read a session log. Raises LogError for a missing file, a file that is not an llmtop
    log, or a format version this llmtop cannot read (naming the version it needs).
    A torn or corrupt line is skipped and reported in `warnings`, never fatal."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise LogError(f"cannot read {p}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise LogError(f"{p} is not text (byte {exc.start} is not UTF-8): not an llmtop session log") from exc
    if not lines:
        raise LogError(f"{p} is empty: not an llmtop session log")
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError as exc:
        raise LogError(f"{p} does not start with an llmtop header record: {exc}") from exc
    if not isinstance(header, dict) or header.get("type") != "header":
        raise LogError(f"{p} does not start with an llmtop header record")
    fmt = header.get("format")
    if fmt not in SUPPORTED_FORMATS:
        raise LogError(
            f"{p} is session-log format {fmt!r}, written by llmtop {header.get('llmtop_version', '?')}; "
            f"this llmtop ({__version__}) reads formats {SUPPORTED_FORMATS}: upgrade llmtop to read it"
        )
    loaded = LoadedLog(header=header)
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            loaded.warnings.append(f"line {number}: unreadable (torn write?), skipped")
            continue
        loaded.records.append(record)
    return loaded
