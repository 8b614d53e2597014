"""The result of `llmtop bench --engines`: one small JSON file (`<stem>.engines.json`) that
ties the engines' own session logs into one comparison.

Each engine keeps a whole bench log of its own (its header: that engine's version, effective
configuration and model), so `llmtop report LOG` and `llmtop compare A B` read any of them as
they read every bench log; this file adds what belongs to the set alone: the engines in the
order given (label, kind, address, version, model, the model file where it was readable, the
log), how the model was matched across them, the rounds as run (each round's engines in the
order they were sent its prompt) and the notes of the run. `llmtop report` of this file is
the set's one comparison. Log paths are written relative to the file's folder when the logs
sit in it (the set moves as a folder), else absolute.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmtop.files import not_regular
from llmtop.sessions.records.log import LogError

SET_TYPE = "llmtop-engine-set"  # the file's "type": what tells it from a session log
SET_FORMAT = 1
SUFFIX = ".engines.json"
MAX_SET_BYTES = 16 * 2**20  # a set of 10 engines × 10,000 rounds is ~3 MB


@dataclass(frozen=True, slots=True)
class ModelFile:
    """A model file read on this machine: its path, size (bytes) and SHA-256 (hex)."""

    path: str
    size: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: path, size, sha256."""
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True, slots=True)
class SetEngine:
    """One engine of the set: label ("llama-server@8080", unique in the set), kind (as
    `llmtop engines` names it), url (its root), version (None: it reports none), model (the
    engine's name for it), model_file (None: not readable here), log (the session log's path
    as written in the file), found_by (how `engines` found it, or "URL given")."""

    label: str
    kind: str
    url: str
    version: str | None
    model: str
    log: str
    model_file: ModelFile | None = None
    found_by: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, every field by its name (model_file as its dict, or null)."""
        return {"label": self.label, "kind": self.kind, "url": self.url,
                "version": self.version, "model": self.model, "log": self.log,
                "model_file": None if self.model_file is None else self.model_file.to_dict(),
                "found_by": self.found_by}


@dataclass(frozen=True)
class EngineSet:
    """The set as written: engines, match ({"how": "file" | "identity" | "name", "said":
    the sentence}), rounds (runners/engines.Round.to_dict each), notes, started_at (ISO
    wall clock, a label), llmtop_version; path: the file read (None before it is written)."""

    engines: list[SetEngine]
    match: dict[str, str]
    rounds: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    started_at: str | None = None
    llmtop_version: str | None = None
    path: str | None = None

    def log_path(self, engine: SetEngine) -> Path:
        """Where `engine`'s log is: its path as written, relative to this file's folder."""
        written = Path(engine.log)
        if written.is_absolute() or self.path is None:
            return written
        return Path(self.path).parent / written

    def to_json(self) -> dict[str, Any]:
        """The file's one JSON object."""
        return {"type": SET_TYPE, "format": SET_FORMAT, "llmtop_version": self.llmtop_version,
                "started_at": self.started_at,
                "engines": [e.to_dict() for e in self.engines], "match": self.match,
                "rounds": self.rounds, "notes": self.notes}


def set_path(log_stem: Path) -> Path:
    """The set's file beside its logs: "<folder>/<stem>.engines.json"."""
    return log_stem.with_name(log_stem.name + SUFFIX)


def write_set(engine_set: EngineSet, path: Path) -> None:
    """Write the set to `path`, the logs' paths made relative where they sit in its folder.
    Raises LogError when it cannot be written."""
    data = engine_set.to_json()
    for entry in data["engines"]:
        log = Path(entry["log"]).resolve()
        if log.parent == path.resolve().parent:
            entry["log"] = log.name
    try:
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise LogError(f"cannot write the engine set {path}: {exc.strerror or exc}") from None


def is_set_file(path: str | os.PathLike[str]) -> bool:
    """True when `path` names an engine set by its suffix (`.engines.json`)."""
    return str(path).endswith(SUFFIX)


def read_set(path: str | os.PathLike[str]) -> EngineSet:
    """Read an engine set. Raises LogError naming what is wrong: missing, not a regular
    file, too large, not JSON, not an engine set, a newer format, or a field of the wrong
    shape."""
    p = Path(path)
    problem = not_regular(p, "an engine set (a .engines.json file)")
    if problem is not None:
        raise LogError(problem)
    try:
        if p.stat().st_size > MAX_SET_BYTES:
            raise LogError(f"{p} is over {MAX_SET_BYTES // 2**20} MiB: not an engine set "
                           "llmtop wrote")
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LogError(f"cannot read {p}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise LogError(f"{p} is not JSON ({exc}): give the .engines.json file "
                       "`llmtop bench --engines` wrote") from None
    if not isinstance(data, dict) or data.get("type") != SET_TYPE:
        raise LogError(f"{p} is not an engine set (its \"type\" is not {SET_TYPE!r})")
    if not isinstance(data.get("format"), int) or data["format"] > SET_FORMAT:
        raise LogError(f"{p} has engine-set format {data.get('format')!r}; this llmtop reads "
                       f"format {SET_FORMAT}: upgrade llmtop")
    try:
        return _from_json(data, str(p))
    except (KeyError, TypeError, ValueError) as exc:
        raise LogError(f"{p}: a field of the engine set is missing or of the wrong type "
                       f"({exc!r})") from None


def _from_json(data: dict[str, Any], path: str) -> EngineSet:
    engines = []
    for entry in data["engines"]:
        file = entry.get("model_file")
        engines.append(SetEngine(
            str(entry["label"]), str(entry["kind"]), str(entry["url"]),
            None if entry.get("version") is None else str(entry["version"]),
            str(entry["model"]), str(entry["log"]),
            None if file is None else ModelFile(str(file["path"]), int(file["size"]),
                                                str(file["sha256"])),
            str(entry.get("found_by", ""))))
    if not engines:
        raise ValueError("no engines")
    match = {str(k): str(v) for k, v in dict(data["match"]).items()}
    rounds = [dict(r) for r in data["rounds"]]
    return EngineSet(engines, match, rounds, [str(n) for n in data.get("notes", [])],
                     data.get("started_at"), data.get("llmtop_version"), path)
