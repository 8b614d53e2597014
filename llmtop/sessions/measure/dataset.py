"""Requests read from a user's file (`bench --dataset`, `load --dataset`): the user's own
traffic in place of llmtop's random-word prompts.

Two shapes, told apart by the file's first non-blank character:

* JSONL, one request per line: `{"prompt": "..."}` or `{"messages": [{"role": "system" |
  "user" | "assistant", "content": "..."}, ...]}` (the last message the user's), with an
  optional `max_tokens` (num_predict, a whole number >= 1) and `options` (Ollama options, an
  object of JSON scalars). A line may also be a ShareGPT record (below).
* ShareGPT: `{"conversations": [{"from": "human" | "gpt" | "system", "value": "..."}]}`, one a
  line, or the whole file one JSON array of them, as ShareGPT_V3 ships. A conversation is sent
  as `vllm bench serve` and AIPerf send it: its system turn if any, then its first human turn
  (the reply's length is not known without the model's tokenizer: `--max-tokens` applies).

A bad record (not JSON, a missing or mistyped field) costs that record only: it is skipped and
its error names the line (the array element, for a JSON array) and the field. The file is read
bounded (files.read_bounded: a regular file, MAX_BYTES at most; MAX_RECORDS records at most,
the rest counted as not read), and its identity (name, size, sha256 of its bytes) goes into the
log header so a run says which traffic it measured.

Prompt sizes are the server's own counts (`prompt_eval_count` in each request's stats); no
calibration applies. `busted` makes a request start with a tag of its own so a server's prefix
cache cannot serve it from an earlier run or request (docs/method.md, "Cache busting").
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmtop.files import read_bounded
from llmtop.safetext import one_line

MAX_BYTES = 1 << 30  # ShareGPT_V3's unfiltered file is 642 MB; a larger file is refused
MAX_RECORDS = 100_000  # records kept; more is more than any bench or sweep sends
MAX_ERRORS_KEPT = 50  # error messages kept (all are counted)
INT32_MAX = 2**31 - 1
ROLES = ("system", "user", "assistant")
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant",
                  "assistant": "assistant", "chatgpt": "assistant", "bard": "assistant",
                  "model": "assistant", "system": "system"}


class DatasetError(ValueError):
    """A dataset file that cannot be used at all (missing, not a regular file, too large, no
    usable record); the message says what and what to do."""


class BadRecord(ValueError):
    """One record that cannot be sent: `field` names the bad field ("" for the whole record)."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name


@dataclass(frozen=True)
class DatasetRequest:
    """One usable record: `line` its 1-based line (a JSON array: its 1-based element),
    `messages` the chat to send (role/content dicts; the last is the user's), `max_tokens`
    its own num_predict (None: the run's), `options` its own Ollama options."""

    line: int
    messages: tuple[Mapping[str, str], ...]
    max_tokens: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def prompt(self) -> str:
        """The last message's text (what the request log's `prompt` keeps)."""
        return self.messages[-1]["content"]

    def busted(self, tag: str) -> tuple[Mapping[str, str], ...]:
        """The messages with `[tag] ` before the first one's text: a prefix no earlier
        request had, so no prefix cache serves it (a few tokens more, which the server's
        count includes)."""
        first, *rest = self.messages
        return ({**first, "content": f"[{tag}] {first['content']}"}, *rest)


@dataclass(frozen=True)
class Dataset:
    """A dataset file read: `records` usable, `errors` the first MAX_ERRORS_KEPT bad records'
    messages, `skipped` how many were bad, `not_read` how many past MAX_RECORDS were left,
    `shape` "jsonl" or "sharegpt-array"; `size` bytes, `sha256` hex of the file's bytes."""

    path: str
    size: int
    sha256: str
    shape: str
    records: tuple[DatasetRequest, ...]
    errors: tuple[str, ...] = ()
    skipped: int = 0
    not_read: int = 0

    @property
    def name(self) -> str:
        """The file's name (no folder)."""
        return Path(self.path).name

    def identity(self) -> dict[str, Any]:
        """What a log header and a report say about the file: name, path, bytes, sha256,
        shape, records (usable), skipped (bad), not_read (past MAX_RECORDS)."""
        return {"file": self.name, "path": self.path, "bytes": self.size,
                "sha256": self.sha256, "shape": self.shape, "records": len(self.records),
                "skipped": self.skipped, "not_read": self.not_read}

    def pick(self, k: int) -> DatasetRequest:
        """Record `k` (0-based), in file order, from the start again past the last."""
        return self.records[k % len(self.records)]


def describe(identity: Mapping[str, Any], used: int | None = None) -> str:
    """One line for a report: "chat.jsonl (2,048 bytes, sha256 1a2b3c4d5e6f…): 20 records,
    18 used, 2 skipped as bad"."""
    digest = str(identity.get("sha256") or "")[:12]
    parts = [f"{identity.get('records')} records"]
    if used is not None:
        parts.append(f"{used} used")
    parts.append(f"{identity.get('skipped', 0)} skipped as bad")
    if identity.get("not_read"):
        parts.append(f"{identity['not_read']} past the first {MAX_RECORDS:,} not read")
    return (f"{one_line(str(identity.get('file')))} ({identity.get('bytes', 0):,} bytes, "
            f"sha256 {digest}…): " + ", ".join(parts))


def read_dataset(path: str | os.PathLike[str]) -> Dataset:
    """Read a dataset file (module docstring). Raises DatasetError for a file that is
    missing, not a regular file, over MAX_BYTES, not UTF-8, or holds no usable record."""
    try:
        data = read_bounded(path, MAX_BYTES)
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file: give the path of a JSONL or ShareGPT "
                           "file") from None
    except OSError as exc:  # NotRegularFile, FileTooLarge, permissions
        raise DatasetError(f"{exc}: give a JSONL or ShareGPT file of at most "
                           f"{MAX_BYTES >> 20} MiB") from None
    digest, size = hashlib.sha256(data).hexdigest(), len(data)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path} is not UTF-8 text (byte {exc.start}): give a JSONL or "
                           "ShareGPT JSON file") from None
    del data
    items: Sequence[tuple[int, Any]]
    if text.lstrip()[:1] == "[":
        shape, items = "sharegpt-array", _array_items(text)
    else:
        shape, items = "jsonl", _lines(text)
    records: list[DatasetRequest] = []
    errors: list[str] = []
    skipped = not_read = 0
    for line, item in items:
        if len(records) >= MAX_RECORDS:
            not_read += 1
            continue
        try:
            records.append(parse_record(line, item))
        except BadRecord as exc:
            skipped += 1
            where = "element" if shape == "sharegpt-array" else "line"
            if len(errors) < MAX_ERRORS_KEPT:
                errors.append(f"{where} {line}" + (f", field {exc.field}" if exc.field else "")
                              + f": {exc}")
    if not records:
        first = f" ({errors[0]})" if errors else ""
        raise DatasetError(f"{path} holds no usable request: {skipped} bad{first}; each line "
                           'needs {"prompt": "..."}, {"messages": [...]} or ShareGPT '
                           '{"conversations": [...]}')
    return Dataset(str(path), size, digest, shape, tuple(records), tuple(errors), skipped,
                   not_read)


def _lines(text: str) -> Sequence[tuple[int, Any]]:
    """(line number, the line's text) of each non-blank line; decoding is the record's."""
    return [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def _array_items(text: str) -> list[tuple[int, Any]]:
    """(element number, its decoded value or a BadRecord) of a JSON array, element by element
    (json.JSONDecoder.raw_decode), so one bad element costs that element: past a syntax
    error the rest of the array cannot be told apart and is one bad record."""
    decoder = json.JSONDecoder()
    items: list[tuple[int, Any]] = []
    pos = text.index("[") + 1
    n = 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            return items
        n += 1
        try:
            value, pos = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError) as exc:
            items.append((n, BadRecord("", f"not JSON from here on ({exc}); the rest of "
                                            "the array is not read")))
            return items
        items.append((n, value))


def parse_record(line: int, item: Any) -> DatasetRequest:
    """One record (a JSONL line's text, or an array element already decoded) as a request.
    Raises BadRecord naming the field."""
    if isinstance(item, BadRecord):
        raise item
    if isinstance(item, str):
        try:
            item = json.loads(item)
        except (ValueError, RecursionError) as exc:
            raise BadRecord("", f"not JSON ({exc})") from None
    if not isinstance(item, dict):
        raise BadRecord("", f"a record is a JSON object, got {type(item).__name__}")
    if "conversations" in item:
        messages = _sharegpt(item["conversations"])
    elif "messages" in item:
        messages = _messages(item["messages"])
    elif "prompt" in item:
        prompt = item["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise BadRecord("prompt", "must be a non-empty string")
        messages = ({"role": "user", "content": prompt},)
    else:
        raise BadRecord("", 'needs "prompt", "messages" or "conversations"')
    return DatasetRequest(line, messages, _max_tokens(item.get("max_tokens")),
                          _options(item.get("options")))


def _messages(value: Any) -> tuple[Mapping[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise BadRecord("messages", "must be a non-empty list of {role, content}")
    out = []
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise BadRecord(f"messages[{i}]", "must be an object {role, content}")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise BadRecord(f"messages[{i}].role",
                            f"{one_line(repr(role))[:40]} is not system, user or assistant")
        if not isinstance(content, str):
            raise BadRecord(f"messages[{i}].content", "must be a string")
        out.append({"role": role, "content": content})
    if out[-1]["role"] != "user" or not out[-1]["content"].strip():
        raise BadRecord(f"messages[{len(out) - 1}]",
                        "the last message must be the user's, with text")
    return tuple(out)


def _sharegpt(value: Any) -> tuple[Mapping[str, str], ...]:
    """The system turn (if it comes first) and the first human turn; every turn is checked
    (a record with a malformed turn is a malformed record, even past the turns sent)."""
    if not isinstance(value, list) or not value:
        raise BadRecord("conversations", "must be a non-empty list of {from, value}")
    system: list[Mapping[str, str]] = []
    human: Mapping[str, str] | None = None
    for i, turn in enumerate(value):
        if not isinstance(turn, dict):
            raise BadRecord(f"conversations[{i}]", "must be an object {from, value}")
        role = SHAREGPT_ROLES.get(str(turn.get("from")).lower())
        text = turn.get("value")
        if role is None:
            raise BadRecord(f"conversations[{i}].from",
                            f"{one_line(repr(turn.get('from')))[:40]} is not human, gpt or "
                            "system")
        if not isinstance(text, str):
            raise BadRecord(f"conversations[{i}].value", "must be a string")
        if role == "system" and i == 0:
            system = [{"role": "system", "content": text}]
        elif role == "user" and human is None:
            if not text.strip():
                raise BadRecord(f"conversations[{i}].value", "the first human turn is empty")
            human = {"role": "user", "content": text}
    if human is None:
        raise BadRecord("conversations", "has no human turn")
    return (*system, human)


def _max_tokens(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= INT32_MAX:
        raise BadRecord("max_tokens", f"must be a whole number from 1 to {INT32_MAX}, got "
                        f"{one_line(json.dumps(value))[:40]}")
    return value


def _options(value: Any) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRecord("options", "must be an object of Ollama options")
    for key, item in value.items():
        if not isinstance(item, str | int | float | bool) or (
                isinstance(item, float) and not math.isfinite(item)):
            raise BadRecord(f"options.{one_line(key)[:40]}", "must be a number, string or "
                            "true/false")
    return dict(value)
