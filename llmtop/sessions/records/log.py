"""The session log: versioned JSONL, one record per line, flushed as each record is written.

The record types and the format version are the schema's (schema.py; the format's history:
docs/reference/session-log.md): every writer hands `SessionLog.write` a typed record, and
`read_log` gives typed records back.
The main ones (field `type`):
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

A record that holds a number no measurement can be (NaN, ±Infinity, 1e400, a magnitude of
2^64 or more, an integer of thousands of digits) or, for a request, a duration that is
negative or over a year, a negative count, an E2E before its TTFT, is skipped with a warning
naming its line and field (schema.decode: base.check_numbers, request.check_request); the rest
is read.

Reading is bounded: a line over MAX_LINE_BYTES (an endless line, `/dev/zero`) is skipped, and
a file that never ends a line within MAX_SKIP_BYTES stops being read, with a warning. `read_log`
returns the log as typed records (schema.py: `RunLog`).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import platformdirs

from llmtop import DISTRIBUTION, __version__
from llmtop.files import LOG_START, not_regular
from llmtop.safetext import json_line
from llmtop.sessions.records.base import RecordError, loads
from llmtop.sessions.records.schema import (
    FORMAT_VERSION,
    SUPPORTED_FORMATS,
    AnyRecord,
    EndRecord,
    Header,
    ProbeRecord,
    RunLog,
    decode,
    fast_decode,
)

__all__ = ["FORMAT_VERSION", "LogError", "SessionLog", "default_log_path", "read_log"]
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


class SessionLog:
    """Append-only writer of typed records (schema.py). Opening writes the header: `header`
    holds its fields (engine, model, options...; format, version and start time are added),
    validated as a Header (raises RecordError for a field of the wrong type). Each write
    flushes (and fsyncs all but probe records).

    Raises LogError when the file cannot be created or written (with the path and the reason).
    """

    def __init__(self, path: str | os.PathLike[str], header: Mapping[str, Any]) -> None:
        self.path = Path(path)
        self.written = 0  # records written whole
        self.lost = 0  # records not written after the log became incomplete
        self.incomplete: str | None = None  # why and where the log stops, once a write failed
        foreign = _foreign(self.path)
        if foreign is not None:
            raise LogError(foreign)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh: IO[str] | None = self.path.open("a", encoding="utf-8")
            self._lock = threading.Lock()  # probe samples arrive from the sampler thread
        except OSError as exc:
            raise LogError(
                f"cannot write the session log {self.path}: {exc.strerror or exc}"
            ) from exc
        self.header = Header.from_json({
            "format": FORMAT_VERSION,
            "llmtop_version": __version__,
            "distribution": DISTRIBUTION,
            "started_at": datetime.now().astimezone().isoformat(),
            **header,
        })
        if not self.write(self.header):
            raise LogError(f"cannot write the session log {self.path}: {self.incomplete}")

    def write(self, record: AnyRecord, *, sync: bool = True) -> bool:
        """Append one record (its `to_json()`) as one line, flushed before returning; `sync`:
        fsync'd too (on disk, not only in the OS's cache). Returns False when it could not be
        written: the first failure sets `incomplete` (where the log stops and why) and every
        later record is counted in `lost`, never raising mid-measurement. Raises LogError
        only for a log already closed (a programming error)."""
        return self.write_raw(record.to_json(), sync=sync)

    def write_raw(self, record: Mapping[str, Any], *, sync: bool = True) -> bool:
        """`write` for a JSON object written as given, bypassing the schema: for tests and
        tools that craft logs by hand (a torn or hostile record). llmtop writes records."""
        line = json_line(record)  # a lone surrogate kept as its JSON escape
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

    def write_probe(self, sample: Mapping[str, Any], request_id: int | None,
                    **fields: Any) -> None:
        """Append a probe sample (already JSON-ready), tagged with the overlapping request
        and `fields` (a sweep's level and request_ids); flushed, not fsync'd (module
        docstring). A sample whose typed fields do not validate is written as it is."""
        body = {"request_id": request_id, **fields, **sample}
        try:
            self.write(ProbeRecord.of(body), sync=False)
        except RecordError:  # never lose a sample over its shape: the reader will say
            self.write_raw({"type": ProbeRecord.TYPE, **body}, sync=False)

    def close(self) -> None:
        """Write the end record and close. Safe to call twice."""
        if self._fh is None:
            return
        try:
            self.write(EndRecord(datetime.now().astimezone().isoformat()))
        finally:
            with contextlib.suppress(OSError):  # a failed flush is already in `incomplete`
                self._fh.close()
            self._fh = None


def _foreign(path: Path) -> str | None:
    """Why `path` must not be opened as a new session's log, or None: an existing, non-empty
    file that is not a session log (llmtop would write its records into someone's file), or
    one that is (another session's, which a second session would spoil)."""
    try:
        if not path.is_file() or path.stat().st_size == 0:
            return None
        with path.open("rb") as fh:
            if fh.read(len(LOG_START)) == LOG_START:
                # another session's log: its readers (report, compare, sessions) read the
                # first session of a file only, so a second one would be in no report
                # (`run --log <a finished bench log>` once appended to it)
                return (f"{path} already holds a session log: a second session in it would "
                        "be read by no report; choose a new file for --log (or remove that "
                        "one)")
    except OSError:
        return None  # opening it says why
    return (f"{path} exists and is not an llmtop session log: llmtop appends its records to "
            "a log, and would write into that file; choose another --log")


def read_log(path: str | os.PathLike[str], chunks: bool = True) -> RunLog:
    """Read a session log into typed records. Raises LogError for a missing file, a file that
    is not an llmtop log, or a format version this llmtop cannot read (naming the version it
    needs). A torn or corrupt line, or a record with a field of the wrong type, is skipped and
    reported in `warnings` ("line N: …"), never fatal. chunks: False leaves the requests'
    `chunks` empty where the line allows (request.without_chunks), for a reader that uses none:
    half the reading of a long log."""
    p = Path(path)
    warnings: list[str] = []
    problem = not_regular(p)  # a FIFO would hang the reader, a device feed it forever
    if problem is not None:
        raise LogError(problem)
    try:
        lines = _bounded_lines(p, warnings)
        _, first = next(lines, (1, b""))
        if first is None:
            raise LogError(f"{p} does not start with an llmtop header record (its first line "
                           f"is over {MAX_LINE_BYTES // 2**20} MiB)")
        header = _read_header(p, _text(p, first) if first else None)
        records: list[AnyRecord] = []
        for number, raw in lines:
            if raw is None:
                warnings.append(f"line {number}: longer than {MAX_LINE_BYTES // 2**20} MiB "
                                "(not a record), skipped")
                continue
            record = _one_record(_text(p, raw), number, warnings, chunks)
            if isinstance(record, Header):
                warnings.append(f"line {number}: a second session starts here (the log was "
                                "reused with --log); this reads the first session only: give "
                                "each run its own --log")
                break
            if record is not None:
                records.append(record)
    except OSError as exc:
        raise LogError(f"cannot read {p}: {exc.strerror or exc}") from exc
    return RunLog.of(header, records, warnings)


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


def _one_record(line: str, number: int, warnings: list[str],
                chunks: bool = True) -> AnyRecord | None:
    """One line as its typed record, or None with a warning naming the line. A request or
    canary record as llmtop writes it (its type first, no number `suspect` could refuse, no
    surrogate) is validated straight from its text, in one pass of pydantic's own parser;
    anything else, or one that fails there, takes the whole path below, which names what
    is wrong."""
    if not line.strip():
        return None
    fast = fast_decode(line, chunks)
    if fast is not None:
        return fast
    try:
        record = loads(line)  # an integer too long for Python is a marker, not a ValueError
    except json.JSONDecodeError:
        warnings.append(f"line {number}: unreadable (torn write?), skipped")
        return None
    except RecursionError:
        warnings.append(f"line {number}: JSON nested too deep to be a record, skipped")
        return None
    if not isinstance(record, dict):
        warnings.append(f"line {number}: not a JSON object, skipped")
        return None
    kind = record.get("type")
    if not isinstance(kind, str) or not kind:
        shown = "no type" if kind is None else f"type {json.dumps(kind)[:40]}"
        warnings.append(f"line {number}: a JSON object with {shown} (every record names its "
                        "type as a string), skipped")
        return None
    try:
        return decode(line, record)
    except RecordError as exc:
        warnings.append(f"line {number}: {exc}; skipped")
        return None


def _read_header(p: Path, line: str | None) -> Header:
    """The typed header of the log at `p` from its first line; raises LogError."""
    if line is None:
        raise LogError(f"{p} is empty: not an llmtop session log")
    try:
        header = json.loads(line)
    except json.JSONDecodeError as exc:
        raise LogError(f"{p} does not start with an llmtop header record: {exc}") from exc
    except ValueError as exc:  # an integer past Python's 4,300-digit conversion limit
        raise LogError(f"{p}: line 1 (the header) holds an integer too long to read ({exc}): "
                       "not a log llmtop wrote") from None
    except RecursionError as exc:
        raise LogError(f"{p} does not start with an llmtop header record (its first line is "
                       "JSON nested too deep)") from exc
    if not isinstance(header, dict) or header.get("type") != "header":
        raise LogError(f"{p} does not start with an llmtop header record")
    fmt = header.get("format")
    if not isinstance(fmt, int) or isinstance(fmt, bool):
        raise LogError(f"{p}: its header's format is {json.dumps(fmt)[:40]}, not a whole number: "
                       "not a log llmtop wrote (llmtop writes \"format\": 1)")
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
