"""llmtop's small cache files (calibrations, the canary's figures, prefill curves, the
llama.cpp self-test's choice), written so that a reader never sees half of one; and the
checks on the files a command reads and writes (docs/hostile-input.md, "Files"): an input
that is not a regular file, an output that would replace an input or someone's file."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path


def write_atomically(path: Path, text: str) -> bool:
    """Write `text` (UTF-8) to `path` through a temporary file in the same folder renamed
    over it, creating the folder; a crash leaves the old file or the new one, never a torn
    one, and no temporary file behind. True when written, False when the folder or file
    cannot be written (OSError: the caller goes on without its cache)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError:
        return False
    return True


# What llmtop's own reports start with, in their first OWN_SNIFF_BYTES: the Markdown title
# ("# llmtop …"), the HTML page's title, the JSON reports' header (its "llmtop_version"),
# and the CSV reports' first columns (reports/run_data.py CSV_COLUMNS, reports/load.py CSV_FIELDS).
OWN_SNIFF_BYTES = 4096
OWN_CSV_STARTS = ("prompt_tokens_target,index,", "level,mode,")
LOG_START = b'{"type": "header"'  # a session log (records/log.py): a measurement


def is_regular_file(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a regular file (following links): not a FIFO, a device, a socket
    or a folder, which a reader would hang on or misread. False when it cannot be read."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _what(mode: int) -> str:
    """What a file of this `st_mode` is, in words ("a FIFO (named pipe)", "a device"…)."""
    return ("a folder" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


def not_regular(path: str | os.PathLike[str],
                wanted: str = "a session log (a .jsonl file)") -> str | None:
    """The message for an input that exists but is not a regular file ("… is a FIFO, not a
    file: give the path of `wanted`"), or None (a regular file, or nothing there: the reader
    says what is missing)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    return f"{path} is {_what(mode)}, not a file: give the path of {wanted}"


class NotRegularFile(OSError):
    """A path that opened as a FIFO, a device, a socket or a folder where a regular file was
    wanted; the message says which (`str(exc)`: "… is a FIFO (named pipe), not a file")."""


class FileTooLarge(OSError):
    """A file longer than its reader's bound; the message gives the bound."""


# O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a writer (a
# blocked open() is in the kernel, where no signal handler of ours runs: SIGTERM could not end
# it). O_NOCTTY: a terminal device never becomes our controlling terminal. Both absent on
# Windows, which has neither FIFOs in the file system nor controlling terminals.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)


def open_regular(path: str | os.PathLike[str]) -> int:
    """A read-only descriptor of `path` (following links) that is a regular file, opened
    without blocking; the caller closes it. Raises NotRegularFile for anything else (checked
    on the open descriptor, so a file swapped after a stat cannot slip through), OSError as
    os.open does."""
    fd = os.open(path, _OPEN_FLAGS)
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegularFile(f"{path} is {_what(mode)}, not a file")
    return fd


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the regular file at `path`, at most `limit` of them (`open_regular`:
    never blocks, never reads a device's endless stream). Raises NotRegularFile, FileTooLarge
    (more than `limit` bytes, which the message gives), OSError."""
    fd = open_regular(path)
    try:
        parts: list[bytes] = []
        got = 0
        while got <= limit:
            block = os.read(fd, min(1 << 20, limit + 1 - got))
            if not block:
                break
            parts.append(block)
            got += len(block)
    finally:
        os.close(fd)
    if got > limit:
        raise FileTooLarge(f"{path} is longer than {limit} bytes")
    return b"".join(parts)


def _same_file(a: os.stat_result, path: str | os.PathLike[str]) -> bool:
    try:
        b = os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def output_problem(out: str | os.PathLike[str], reads: Iterable[str | os.PathLike[str] | None],
                   force: bool = False) -> str | None:
    """Why `out` must not be written by a command that reads `reads`, or None when it may:

    * it is one of `reads` (the same file, through any name or link): never, even with
      `force` — the report would replace what it reports on;
    * it is an existing, non-empty regular file that is not llmtop's own report (a session
      log, anyone's file; OWN_SNIFF_BYTES): only with `force`.

    Nothing there, an empty file, llmtop's own earlier report, or something that is not a
    regular file (/dev/stdout, a FIFO a reader waits on) may be written."""
    try:
        st = os.stat(out)
    except OSError:
        return None
    for path in reads:
        if path is not None and _same_file(st, path):
            return (f"{out} is {path}, which this command reads: the report would replace it; "
                    "write it to another file")
    if not stat.S_ISREG(st.st_mode) or st.st_size == 0 or force:
        return None
    try:
        with open(out, "rb") as fh:
            head = fh.read(OWN_SNIFF_BYTES)
    except OSError:
        return None  # the write will say why
    if head.startswith(LOG_START):
        kind = "an llmtop session log (a measurement)"
    elif b"llmtop" in head or head.decode("utf-8", "replace").startswith(OWN_CSV_STARTS):
        return None
    else:
        kind = "not an llmtop report"
    return (f"{out} exists and is {kind}: writing the report would replace it; choose "
            "another --out, or add --force to replace it")


def readable_by_others(path: str | os.PathLike[str]) -> str | None:
    """A warning when the secret file at `path` (a token) can be read by its group or by
    every user (mode & 0o044: `chmod 600` keeps it the owner's), else None (also when it
    cannot be stat'ed: reading it says why)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if not mode & (stat.S_IRGRP | stat.S_IROTH):
        return None
    who = "every user" if mode & stat.S_IROTH else "its group"
    return (f"the token file {path} can be read by {who} (mode {stat.S_IMODE(mode):o}): "
            f"anyone who reads it can read this machine's probes; `chmod 600 {path}`")
