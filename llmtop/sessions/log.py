"""The session log: versioned JSONL, one record per line, flushed as each record is written.

Record types (field `type`):
* "header": first line. `format` (FORMAT_VERSION), `llmtop_version`, `engine`, `host`, `model`,
  `model_details`, `options`, `environment` (OS/CPU/RAM), `started_at` (wall-clock label).
* "request": prompt, options, status, error, the server's stats (Ollama names, ns), derived
  metrics (ms, tokens/s), `client_prep_ms` (the client's time before its request was on the
  socket; None from an engine that cannot tell), and `chunks`: [[offset_ns from send,
  content, thinking], ...].
* "probe": one probe sample (see llmtop.probes), with the id of the request it overlapped.
* "canary": one machine-speed canary run between requests (probes/canary.py), with the id of
  the request that followed it.
* "end": `ended_at`, written when a session closes cleanly.

A crash loses at most the line being written: every record is flushed on write (a crash of
llmtop loses nothing flushed), and the reader skips a torn last line, saying so. Header,
request and end records are also fsync'd (they survive a crash of the machine); probe
records, one or two a second, are not: an fsync costs milliseconds of I/O wait, and losing
the last seconds of probe samples in a power cut is not worth that on every sample. A write
that fails mid-run (disk full, a file size limit) never interrupts the measurement: the log
stops there, `incomplete` says where and why, and the command reports it once after printing
its result.

Reading is bounded: a line over MAX_LINE_BYTES (an endless line, `/dev/zero`) is skipped, and
a file that never ends a line within MAX_SKIP_BYTES stops being read, with a warning. `read_log`
returns the log as typed records
(records.py: `RunLog`, `RequestRecord`, `ProbeRecord`).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import platformdirs

from llmtop import DISTRIBUTION, __version__
from llmtop.sessions.records import (
    CanaryRecord,
    Header,
    ProbeRecord,
    RecordError,
    RequestRecord,
    RunLog,
)
from llmtop.sessions.request import RequestResult

FORMAT_VERSION = 1
# History of the format. Bump it when a reader of the previous version would misread a new
# log; a field that older readers ignore needs no bump, and readers default a missing one
# (records.py), so every version-1 log reads.
# 1 (llmtop 0.1): header / request / probe / end records. Added within version 1: bench
#   logs (calibration, environment, summary, interrupted records; request fields phase,
#   index, prompt_tokens_target, prompt_words); preflight records; the relay (header via,
#   upstream; request path, pair); the header's machine record moved from a bench-only
#   `machine` field into `environment` for every log (older bench logs have both); canary
#   records and the request field `machine` (the machine-speed canary and readings).
SUPPORTED_FORMATS = (1,)
MAX_LINE_BYTES = 16 * 1024 * 1024  # a request record with 10k chunks is ~1 MB
MAX_SKIP_BYTES = 64 * 1024 * 1024  # reading on for the end of an over-long line, at most
READ_CHUNK_BYTES = 1024 * 1024


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
        "client_prep_ms": None if result.prep_ns is None else round(result.prep_ns / 1e6, 3),
        "content": result.content,
        "thinking": result.thinking,
        "chunks": [
            [e.t_ns - result.sent_ns, e.content, e.thinking]
            for e in result.events
            if not e.done or e.has_text
        ],
    }


class SessionLog:
    """Append-only writer. Opening writes the header; each write flushes (and fsyncs all but
    probe records).

    Raises LogError when the file cannot be created or written (with the path and the reason).
    """

    def __init__(self, path: str | os.PathLike[str], header: dict[str, Any]) -> None:
        self.path = Path(path)
        self.written = 0  # records written whole
        self.lost = 0  # records not written after the log became incomplete
        self.incomplete: str | None = None  # why and where the log stops, once a write failed
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh: IO[str] | None = self.path.open("a", encoding="utf-8")
            self._lock = threading.Lock()  # probe samples arrive from the sampler thread
        except OSError as exc:
            raise LogError(
                f"cannot write the session log {self.path}: {exc.strerror or exc}"
            ) from exc
        if not self.write(
            {
                "type": "header",
                "format": FORMAT_VERSION,
                "llmtop_version": __version__,
                "distribution": DISTRIBUTION,
                "started_at": datetime.now().astimezone().isoformat(),
                **header,
            }
        ):
            raise LogError(f"cannot write the session log {self.path}: {self.incomplete}")

    def write(self, record: dict[str, Any], *, sync: bool = True) -> bool:
        """Append one record as one line, flushed before returning; `sync`: fsync'd too (on
        disk, not only in the OS's cache). Returns False when it could not be written: the
        first failure sets `incomplete` (where the log stops and why) and every later record
        is counted in `lost`, never raising mid-measurement. Raises LogError only for a log
        already closed (a programming error)."""
        line = json.dumps(record, ensure_ascii=False, default=str)
        with self._lock:
            if self._fh is None:
                raise LogError(f"the session log {self.path} is closed")
            if self.incomplete is not None:
                self.lost += 1
                return False
            try:
                self._fh.write(line + "\n")
                self._fh.flush()
                if sync:
                    os.fsync(self._fh.fileno())
            except OSError as exc:
                self.lost += 1
                self.incomplete = (
                    f"{exc.strerror or exc}: the session log {self.path} stops after its first "
                    f"{self.written} records (intact); record {self.written + 1} "
                    f"({record.get('type', '?')}) and what came after were not written")
                return False
            self.written += 1
            return True

    def write_probe(self, sample: dict[str, Any], request_id: int | None) -> None:
        """Append a probe sample (already JSON-ready), tagged with the overlapping request;
        flushed, not fsync'd (module docstring)."""
        self.write({"type": "probe", "request_id": request_id, **sample}, sync=False)

    def close(self) -> None:
        """Write the end record and close. Safe to call twice."""
        if self._fh is None:
            return
        try:
            self.write({"type": "end", "ended_at": datetime.now().astimezone().isoformat()})
        finally:
            with contextlib.suppress(OSError):  # a failed flush is already in `incomplete`
                self._fh.close()
            self._fh = None


def read_log(path: str | os.PathLike[str]) -> RunLog:
    """Read a session log into typed records. Raises LogError for a missing file, a file that
    is not an llmtop log, or a format version this llmtop cannot read (naming the version it
    needs). A torn or corrupt line, or a record with a field of the wrong type, is skipped and
    reported in `warnings` ("line N: …"), never fatal."""
    p = Path(path)
    warnings: list[str] = []
    try:
        lines = _bounded_lines(p, warnings)
        _, first = next(lines, (1, b""))
        if first is None:
            raise LogError(f"{p} does not start with an llmtop header record (its first line "
                           f"is over {MAX_LINE_BYTES // 2**20} MiB)")
        header = _read_header(p, _text(p, first) if first else None)
        requests: list[RequestRecord] = []
        probes: list[ProbeRecord] = []
        others: list[dict[str, Any]] = []
        canaries: list[CanaryRecord] = []
        for number, raw in lines:
            if raw is None:
                warnings.append(f"line {number}: longer than {MAX_LINE_BYTES // 2**20} MiB "
                                "(not a record), skipped")
                continue
            _one_record(_text(p, raw), number, requests, probes, others, warnings, canaries)
    except OSError as exc:
        raise LogError(f"cannot read {p}: {exc.strerror or exc}") from exc
    return RunLog(
        header, tuple(requests), tuple(probes), tuple(others), tuple(warnings), tuple(canaries)
    )


def _text(p: Path, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LogError(
            f"{p} is not text (byte {exc.start} of a line is not UTF-8): not an llmtop session log"
        ) from exc


def _bounded_lines(p: Path, warnings: list[str]) -> Iterator[tuple[int, bytes | None]]:
    """(line number, the line without its newline — None when over MAX_LINE_BYTES) for each
    line of `p`, in bounded memory; stops with a warning when an over-long line does not end
    within MAX_SKIP_BYTES (an endless stream such as /dev/zero)."""
    with p.open("rb") as fh:
        number = 0
        while True:
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            number += 1
            if len(raw) <= MAX_LINE_BYTES or raw.endswith(b"\n"):
                yield number, raw.rstrip(b"\r\n")
                continue
            skipped = len(raw)
            while not raw.endswith(b"\n") and skipped < MAX_SKIP_BYTES:
                raw = fh.readline(READ_CHUNK_BYTES)
                if not raw:
                    break
                skipped += len(raw)
            if not raw.endswith(b"\n") and raw:
                warnings.append(f"line {number}: no end of line within {skipped // 2**20} MiB; "
                                "the rest of the file was not read")
                yield number, None
                return
            yield number, None


def _one_record(
    line: str,
    number: int,
    requests: list[RequestRecord],
    probes: list[ProbeRecord],
    others: list[dict[str, Any]],
    warnings: list[str],
    canaries: list[CanaryRecord],
) -> None:
    """Parse one line into its typed list, or add a warning naming the line."""
    if not line.strip():
        return
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        warnings.append(f"line {number}: unreadable (torn write?), skipped")
        return
    if not isinstance(record, dict):
        warnings.append(f"line {number}: not a JSON object, skipped")
        return
    try:
        if record.get("type") == "request":
            requests.append(RequestRecord.from_json(line))
        elif record.get("type") == "probe":
            probes.append(ProbeRecord.from_json(line))
        elif record.get("type") == "canary":
            canaries.append(CanaryRecord.from_json(line))
        else:
            others.append(record)
    except RecordError as exc:
        warnings.append(f"line {number}: {exc}; skipped")


def _read_header(p: Path, line: str | None) -> Header:
    """The typed header of the log at `p` from its first line; raises LogError."""
    if line is None:
        raise LogError(f"{p} is empty: not an llmtop session log")
    try:
        header = json.loads(line)
    except json.JSONDecodeError as exc:
        raise LogError(f"{p} does not start with an llmtop header record: {exc}") from exc
    if not isinstance(header, dict) or header.get("type") != "header":
        raise LogError(f"{p} does not start with an llmtop header record")
    fmt = header.get("format")
    if fmt not in SUPPORTED_FORMATS:
        raise LogError(
            f"{p} is session-log format {fmt!r}, written by llmtop "
            f"{header.get('llmtop_version', '?')}; this llmtop ({__version__}) reads formats "
            f"{SUPPORTED_FORMATS}: upgrade llmtop to read it"
        )
    try:
        return Header.from_json(line)
    except RecordError as exc:
        raise LogError(f"{p}: line 1: {exc}") from exc
