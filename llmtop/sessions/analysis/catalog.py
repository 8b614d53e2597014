"""The saved session logs: one line each (date, engine, model, kind, requests, verdict).

Reads each log in full (read_log), so the verdict is the one `llmtop report` would give. A
log this llmtop cannot read (another format version, not a log at all) is listed with the
reason instead of being skipped, so a user sees why an old log does not open.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import platformdirs

from llmtop.safetext import one_line
from llmtop.sessions.analysis.load import analyze_sweep
from llmtop.sessions.analysis.load_verdict import noisy_levels
from llmtop.sessions.analysis.run import analyze_run, noisy_samples
from llmtop.sessions.records.log import LogError, read_log
from llmtop.sessions.records.schema import RunLog


def sessions_folder() -> Path:
    """Where llmtop writes its logs by default (log.default_log_path's folder)."""
    return Path(platformdirs.user_data_dir("llmtop")) / "sessions"


@dataclass(frozen=True, slots=True)
class SessionEntry:
    """One saved log. started: the header's wall-clock start (ISO); kind: "session",
    "bench", "load", "watch" (engine: the first upstream; model: the models seen; no
    verdict: other apps' requests are not a protocol to judge); requests: request records;
    ok: those in the statistics; statuses: every request counted by the word the report
    uses for it ("ok", "warm-up", "model load", "cold-start", "error", ...); verdict: the
    analysis verdict ("clean", "contaminated", "inconclusive"), None when the log holds a
    single request (nothing to judge), or "unreadable" with `problem`; traffic: what was
    sent when not llmtop's own prompts ("dataset chat.jsonl", "replay of app-traffic.jsonl"),
    shown after the kind."""

    path: str
    started: str | None = None
    engine: str | None = None
    model: str | None = None
    kind: str | None = None
    requests: int = 0
    ok: int = 0
    verdict: str | None = "unreadable"
    problem: str | None = None
    statuses: dict[str, int] = field(default_factory=dict)
    noisy: bool | None = False  # a NOISY probe sample was taken during one of its requests
    # (None: no probe sample was taken during any of them, as `run --json` says it)
    probe_samples: tuple[int, int] = (0, 0)  # (NOISY, all) probe samples during its requests
    # (a watch log: its requests judged NOISY, its requests judged at all)
    traffic: str | None = None

    def cells(self) -> tuple[str, str, str, str, str, str]:
        """The list's cells, the same in `llmtop sessions` and the TUI's Ctrl+O: date,
        engine, model, kind, requests by status, verdict ("—" for a single request, "— NOISY
        during the request" when a NOISY probe sample overlapped it, the reason for an
        unreadable log); each on one line, its control characters shown as escapes
        (safetext.one_line: the names come from the log)."""
        date = (self.started or "")[:19].replace("T", " ") or "n/a"
        if self.noisy:
            unjudged = "— NOISY during the request"
        elif self.requests and not self.probe_samples[1]:
            unjudged = "— (no probe sample)"  # not "quiet": nothing looked
        else:
            unjudged = "—"
        verdict = (self.verdict or unjudged if self.problem is None
                   else f"unreadable: {self.problem}")
        kind = self.kind or "n/a"
        if self.traffic:
            kind += f" · {self.traffic}"
        return (one_line(date), one_line(self.engine or "n/a"), one_line(self.model or "n/a"),
                one_line(kind), self.requests_text, one_line(verdict, 400))

    @property
    def requests_text(self) -> str:
        """"10: 9 ok, 1 cold-start" (the statuses, ok first), or "0"."""
        if not self.statuses:
            return str(self.requests)
        order = sorted(self.statuses.items(), key=lambda kv: (kv[0] != "ok", -kv[1], kv[0]))
        return f"{self.requests}: " + ", ".join(f"{n} {word}" for word, n in order)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


# said as the status words are, adjectives of "requests": "4 cache-pair, 2 conversation"
CONTEXT_WORDS = {"cache-cold": "cache-pair", "cache-warm": "cache-pair",
                 "turn": "conversation", "turn-cold": "conversation (cache off)"}


def entry(path: str | os.PathLike[str]) -> SessionEntry:
    """The catalogue line of one log; never raises for a bad log (verdict "unreadable")."""
    try:
        log = read_log(path)
    except LogError as exc:
        return SessionEntry(str(path), problem=str(exc))
    h = log.header
    if h.kind == "watch":  # other apps' requests: their own statuses, no bench verdict
        models = sorted({r.model for r in log.requests if r.model})
        statuses = Counter(str(r.status) for r in log.requests)
        # the watch judges each request by the samples around it (its `probe_verdict`);
        # its probe records are the machine's between requests too, tied to none
        judged = [r.watch.probe_verdict for r in log.requests if r.watch.probe_verdict]
        seen = (judged.count("NOISY"), len(judged))
        return SessionEntry(str(path), h.started_at, h.upstream, ", ".join(models) or None,
                            h.kind, len(log.requests), statuses.get("ok", 0), None,
                            statuses=dict(statuses), noisy=seen[0] > 0 if seen[1] else None,
                            probe_samples=seen)
    if h.kind == "load":  # a sweep's verdict is its own (load_verdict.py), as its report's
        return _load_entry(str(path), log)
    analysis = analyze_run(log)
    words: Counter[str] = Counter("model load" for _ in analysis.load_requests)
    for size in analysis.sizes:
        words.update("warm-up" if r.phase == "warmup" else str(r.status) for r in size.requests)
    # the cache pairs' and the conversation's requests, which are in no size (else
    # "35: 20 ok, 2 warm-up, 1 model load" counted 23)
    words.update(CONTEXT_WORDS[r.phase] for r in log.requests if r.phase in CONTEXT_WORDS)
    single = len(log.requests) <= 1
    samples = noisy_samples(log.probes)
    return SessionEntry(str(path), h.started_at, h.engine, h.model, h.kind, len(log.requests),
                        analysis.ok_count, None if single else analysis.verdict,
                        statuses=dict(words), noisy=samples[0] > 0 if samples[1] else None,
                        probe_samples=samples, traffic=traffic(log))


def traffic(log: RunLog) -> str | None:
    """What a bench or load log sent when it was not llmtop's own calibrated prompts: "dataset
    NAME" (its `--dataset` file's name) or "replay of NAME" (the watch log it replayed), the
    file's name without its folder; None otherwise."""
    h = log.header
    config = h.load if h.kind == "load" else h.bench
    if config is None:
        return None
    replay = getattr(config, "replay", None)
    if replay:
        return f"replay of {Path(str(replay.get('watch_log', '?'))).name}"
    if config.dataset:
        return f"dataset {Path(str(config.dataset.get('file', '?'))).name}"
    return None


def _load_entry(path: str, log: RunLog) -> SessionEntry:
    """A sweep's line: its requests counted by the words its report uses (the bench status
    of each measured request, then "warm-up" and "model load" for the rest), and the
    sweep's verdict word, with its NOISY levels ("contaminated: 2 users NOISY")."""
    h = log.header
    sweep = analyze_sweep(log)
    words: Counter[str] = Counter()
    for lv in sweep.levels:
        words.update(lv.statuses)
    others = [r for r in log.requests if r.phase != "measure"]
    words.update("warm-up" if r.phase == "warmup" else "model load" for r in others)
    word = str(sweep.verdict.word)
    if noisy := noisy_levels(sweep.levels):
        word += ": " + ", ".join(lv.label for lv in noisy) + " NOISY"
    ok = sum(lv.ok for lv in sweep.levels)
    # a sweep's samples are tagged with the level running, not one request (else
    # "contaminated: 1 user NOISY" beside probe_samples [0, 0])
    in_levels = [p for p in log.probes if p.level is not None or p.request_ids]
    samples = (sum(1 for p in in_levels if p.noisy), len(in_levels))
    return SessionEntry(path, h.started_at, h.engine, h.model, h.kind, len(log.requests), ok,
                        word, statuses=dict(words), noisy=bool(noisy) or samples[0] > 0,
                        probe_samples=samples, traffic=traffic(log))


def log_files(paths: Iterable[str | os.PathLike[str]] = ()) -> list[Path]:
    """The .jsonl files named, or found in the folders named (default: `sessions_folder`),
    newest first by modification time (`catalogue` then orders by start). A missing default
    folder gives []."""
    found: list[Path] = []
    for p in [Path(x) for x in paths] or [sessions_folder()]:
        if p.is_dir():
            found.extend(f for f in p.glob("*.jsonl") if f.is_file())
        elif p.exists():
            found.append(p)
    return sorted(found, key=lambda f: f.stat().st_mtime, reverse=True)


def catalogue(paths: Iterable[str | os.PathLike[str]] = ()) -> list[SessionEntry]:
    """One SessionEntry per log file (see `log_files`), newest start first (the date the
    list shows; a log still being written ends later than it started). Logs without a
    readable start follow, newest file first."""
    entries = [entry(f) for f in log_files(paths)]
    return sorted(entries, key=lambda e: (_start(e) is None, -(_start(e) or 0.0)))


def _start(e: SessionEntry) -> float | None:
    """The entry's start as a POSIX time (a start without a zone is read as UTC), else None."""
    try:
        when = datetime.fromisoformat(e.started or "")
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
