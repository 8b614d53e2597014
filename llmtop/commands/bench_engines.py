"""`llmtop bench --engines A,B,…`: the bench protocol on several engines, interleaved in
rounds (sessions/runners/engines.py), one comparison out (analysis/engine_set.py).

An item names an engine as `llmtop engines` prints it: its kind ("llama-server",
"llmtop-embedded", "ollama", …: the one engine of that kind answering here), kind@port
("llama-server@8080": one of several, or one on a port of its own), or a URL
("http://127.0.0.1:8080", "http://10.0.0.5:11434": identified by the same signatures). Each
engine gets a bench log of its own beside the set's file (<stem>-<label>.jsonl and
<stem>.engines.json: records/engine_set.py says why), so `report` and `compare` read each log
as any bench log and `llmtop report <stem>.engines.json` the whole set.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from llmtop.exitcodes import ExitCode, UsageError

if TYPE_CHECKING:
    from llmtop.engines.connection import Connection
    from llmtop.engines.discovery import FoundEngine
    from llmtop.sessions.analysis.engine_set import ModelMatch
    from llmtop.sessions.measure.config import BenchConfig
    from llmtop.sessions.records.engine_set import ModelFile
    from llmtop.sessions.runners.bench import BenchOutcome, BenchProgress
    from llmtop.sessions.runners.engines import InterleavedOutcome, Round

# What one set cannot run: each is a single-engine protocol, or sends one engine's requests
# outside the rounds (flag, what it is) — refused rather than run on some engines only
_SINGLE_ENGINE = (("runs", 1, "--runs"), ("compare_relay", False, "--compare-relay"),
                  ("dataset", None, "--dataset"), ("cache_pairs", 0, "--cache-pairs"),
                  ("turns", 0, "--turns"), ("relay", None, "--relay"),
                  ("model_path", None, "--model-path"), ("host", None, "--host"),
                  ("depths", None, "--depths"))
HASH_CHUNK = 2**20


def check_engine_flags(args: argparse.Namespace) -> None:
    """Raise UsageError for a flag `--engines` cannot honour (_SINGLE_ENGINE, --engine, the
    relay path), before anything is probed."""
    for name, default, flag in _SINGLE_ENGINE:
        if getattr(args, name, default) not in (default, None, False, 0, ()):
            raise UsageError(f"{flag} measures one engine: run it without --engines (each "
                             "engine alone with `llmtop bench`)")
    if getattr(args, "engine", "auto") != "auto":
        raise UsageError("--engines names the engines; leave out --engine")
    if getattr(args, "via", "direct") != "direct":
        raise UsageError("--engines measures each engine directly; leave out --via")


def _port(item: str) -> int | None:
    if item.startswith(("http://", "https://")):
        parts = urlsplit(item)
        return parts.port or (443 if parts.scheme == "https" else 80)
    return int(item.split("@")[1]) if "@" in item else None


class NotAnswering(Exception):
    """No engine answers for an item (at its URL, or of its kind here): the set exits
    ENGINE_UNREACHABLE, as a single `bench` whose engine does not answer does."""


def kinds() -> tuple[str, ...]:
    """The kinds discovery names engines by (engines/discovery.FoundEngine.kind): what an
    item's kind may be."""
    from llmtop.engines.discovery import OLLAMA_API, SERVES_LISTED

    return (*OLLAMA_API, *SERVES_LISTED, "lm-studio", "openai-compatible")


def check_kind(kind: str) -> None:
    """Raise UsageError for a `kind` none of `kinds()`, listing them: an item no engine
    answers for whose kind is a typo is a usage error, not an engine that does not answer
    (a kind of its own still names a generic server on its port: `_named_generic`)."""
    known = kinds()
    if kind not in known:
        raise UsageError(f"{kind!r} is not an engine kind: give one of {', '.join(known)} "
                         "(as `llmtop engines` prints them), kind@port or a URL")


async def resolve(items: Sequence[str]) -> list[FoundEngine]:
    """Each item's engine (the module docstring's rules). Raises UsageError for a kind
    none of `kinds()`, a kind that several engines answer as or an engine named twice, and
    NotAnswering naming an item no engine answers for."""
    from llmtop.connect import find_engines
    from llmtop.engines.discovery import discover

    ports = sorted({p for item in items if (p := _port(item)) is not None
                    and not item.startswith("http")})
    found = (await find_engines(ports)).engines
    out = []
    for item in items:
        if item.startswith("http"):
            parts = urlsplit(item)
            there = (await discover([_port(item) or 80],
                                    addresses=[parts.hostname or ""])).engines
            if not there:
                raise NotAnswering(f"no LLM engine answers at {item}: is it started, and "
                                   "is that its address?")
            out.append(replace(there[0], found_by="URL given"))
            continue
        kind, _, port = item.partition("@")
        matches = [e for e in found if e.kind == kind
                   and (not port or urlsplit(e.url).port == int(port))]
        if not matches and port:
            matches = _named_generic(found, kind, int(port))
        if not matches:
            check_kind(kind)
            seen = ", ".join(f"{e.kind}@{urlsplit(e.url).port}" for e in found) or "none"
            raise NotAnswering(f"no {kind} engine answers here"
                               f"{' on port ' + port if port else ''} (engines found: "
                               f"{seen}): start it, or name it by its URL")
        if len(matches) > 1:
            raise UsageError(f"{len(matches)} {kind} engines answer here ("
                             + ", ".join(e.url for e in matches) + f"): name one as {kind}@PORT")
        out.append(matches[0])
    if len({e.url for e in out}) != len(out):
        raise UsageError("two items name the same engine: give each engine once")
    return out


def _named_generic(found: Sequence[FoundEngine], kind: str, port: int) -> list[FoundEngine]:
    """The engine on `port` that answered only as "openai-compatible" (its own signature
    route unread: llama-cpp-python's /openapi.json can take longer than a probe's timeout
    while the server warms up), taken as the `kind` the user named it; [] when there is
    none, or the kind needs another API than OpenAI's (Ollama's)."""
    from llmtop.engines.discovery import OLLAMA_API

    if kind in OLLAMA_API:
        return []
    return [replace(e, kind=kind, found_by=f"{e.found_by}; named {kind} by --engines (it "
                    "answered as an OpenAI-compatible server)")
            for e in found if e.kind == "openai-compatible" and urlsplit(e.url).port == port]


def label_of(engine: FoundEngine) -> str:
    """"llama-server@8080": the engine's kind and port (its host too when not loopback)."""
    parts = urlsplit(engine.url)
    host = "" if parts.hostname in ("127.0.0.1", "::1", "localhost") else f"{parts.hostname}:"
    return f"{engine.kind}@{host}{parts.port}"


def log_paths(log: str | None, labels: Sequence[str]) -> tuple[Path, list[Path]]:
    """The set's file and each engine's log: from --log's stem ("x.jsonl" → x.engines.json,
    x-<label>.jsonl), else a new default bench stem."""
    from llmtop.sessions.records.engine_set import set_path
    from llmtop.sessions.records.log import default_log_path

    base = Path(log) if log else default_log_path("bench")
    stem = base.with_suffix("") if base.suffix == ".jsonl" else base
    logs = [stem.with_name(f"{stem.name}-{re.sub(r'[^A-Za-z0-9._-]', '-', label)}.jsonl")
            for label in labels]
    return set_path(stem), logs


def _read_file(path: str, hashed: dict[tuple[str, int, int], str]) -> ModelFile | None:
    """The file at `path` with its size and SHA-256 (hashed once per (path, size, mtime) in
    `hashed`); None when it is not a readable regular file. Blocking: run in a thread."""
    from llmtop.sessions.records.engine_set import ModelFile

    p = Path(path)
    try:
        if not p.is_file():
            return None
        stat = p.stat()
        key = (str(p.resolve()), stat.st_size, stat.st_mtime_ns)
        if key not in hashed:
            digest = hashlib.sha256()
            with p.open("rb") as fh:
                while chunk := fh.read(HASH_CHUNK):
                    digest.update(chunk)
            hashed[key] = digest.hexdigest()
    except OSError:
        return None
    return ModelFile(str(p), stat.st_size, hashed[key])


async def model_file(conn: Connection, engine: FoundEngine,
                     hashed: dict[tuple[str, int, int], str]) -> ModelFile | None:
    """The model file this engine serves, where this machine can read it: llama-server's
    `/props` model_path, an Ollama-API engine's `/api/show` modelfile "FROM /path", an
    OpenAI server whose model name is a path; hashed once per (path, size, mtime) in
    `hashed`. None when none is readable."""
    import asyncio

    path = await _model_path(conn, engine)
    return None if path is None else await asyncio.to_thread(_read_file, path, hashed)


async def _model_path(conn: Connection, engine: FoundEngine) -> str | None:
    import httpx

    config = conn.engine_config if isinstance(conn.engine_config, dict) else {}
    if isinstance(config.get("model_path"), str):
        return config["model_path"]
    if engine.api == "ollama":
        try:
            async with httpx.AsyncClient(trust_env=False, timeout=5.0) as client:
                shown = (await client.post(f"{engine.url}/api/show",
                                           json={"model": conn.model})).json()
        except (httpx.HTTPError, ValueError):
            return None
        text = shown.get("modelfile") if isinstance(shown, dict) else None
        found = re.search(r"^FROM\s+(/\S+)\s*$", text or "", re.MULTILINE)
        return found.group(1) if found else None
    return conn.model if "/" in conn.model or conn.model.endswith(".gguf") else None


def progress_printer(label: str, quiet: bool):
    """One stderr line per finished request and per phase message, prefixed by the engine's
    label (quiet: none, as `--json` keeps stderr short)."""
    def show(p: BenchProgress) -> None:
        if quiet:
            return
        if p.result is not None:
            m = p.result.metrics
            ttft = "n/a" if m.ttft_ms is None else f"{m.ttft_ms:.1f} ms"
            rate = ("n/a" if m.server_decode_tps is None
                    else f"{m.server_decode_tps:.1f} tok/s")
            size = f"[{p.target} tok] " if p.target is not None else ""
            print(f"{label}: {size}{p.phase} {p.done}/{p.total}: {p.result.status} · TTFT "
                  f"{ttft} · decode {rate}", file=sys.stderr, flush=True)
        elif p.message and p.phase in ("environment", "preflight", "calibrating"):
            print(f"llmtop bench: {label}: {p.message}", file=sys.stderr, flush=True)
    return show


async def _connect(args: argparse.Namespace, engines: Sequence[FoundEngine]
                   ) -> list[Connection] | int:
    """A connection to each engine (the model: --model, else the one it has loaded or lists
    first; its processes identified by its own address, since one --engine-pid cannot name
    several engines'), or, when one fails, the failure's exit code (`llmtop: <label>:
    <failure>` said on stderr; the connections made are closed)."""
    from llmtop.connect import connect
    from llmtop.engines.base import EngineError
    from llmtop.engines.events import exit_code_for

    conns: list[Connection] = []
    try:
        for engine in engines:
            flag = {"ollama": "ollama", "llmtop-embedded": "embedded"}.get(engine.kind, "openai")
            conns.append(await connect(flag, engine.host, args.model or engine.model))
    except EngineError as exc:
        for conn in conns:
            await conn.close()
        print(f"llmtop: {label_of(engines[len(conns)])}: {exc.failure}", file=sys.stderr)
        return exit_code_for(exc.failure.kind)
    return conns


async def run_set(args: argparse.Namespace, asked: BenchConfig) -> int:
    """Resolve, connect, match the model, run the rounds, write the set's file, print its
    report; returns `exit_code`'s code, ENGINE_UNREACHABLE when no engine answers for an
    item, or a connection's failure's code (USAGE-level refusals raise UsageError)."""
    import contextlib
    from datetime import datetime

    from llmtop import __version__
    from llmtop.sessions.analysis.engine_set import match_models

    try:
        engines = await resolve(args.engines)
    except NotAnswering as exc:
        print(f"llmtop bench: {exc}", file=sys.stderr)
        return ExitCode.ENGINE_UNREACHABLE
    labels = [label_of(e) for e in engines]
    started = datetime.now().astimezone().isoformat()
    conns = await _connect(args, engines)
    if isinstance(conns, int):
        return conns
    async with contextlib.AsyncExitStack() as stack:
        for conn in conns:
            stack.push_async_callback(conn.close)
        hashed: dict[tuple[str, int, int], str] = {}
        files = [await model_file(c, e, hashed) for c, e in zip(conns, engines, strict=True)]
        match = match_models(labels, [c.model for c in conns], files)
        print(f"llmtop bench: model matched {match.how}: {match.said}", file=sys.stderr)
        if match.refused:
            raise UsageError(f"not measured: {match.said}")
        config = replace(asked, remeasure_budget=0)
        set_file, logs = log_paths(args.log, labels)
        outcome = await _interleave(args, conns, labels, logs, config)
    if isinstance(outcome, int):
        return outcome
    return _write_and_report(args, engines, labels, conns, files, match, outcome, set_file,
                             started, __version__)


async def _interleave(args: argparse.Namespace, conns: Sequence[Connection],
                      labels: Sequence[str], logs: Sequence[Path], config: BenchConfig
                      ) -> InterleavedOutcome | int:
    """Each engine's BenchRunner, run in rounds; the outcome, or the ExitCode a calibration
    failure (REQUEST_FAILED) or a NOISY preflight under --require-quiet ended it with."""
    from llmtop.commands.bench_end import bench_ended
    from llmtop.sessions.records.log import LogError
    from llmtop.sessions.runners.bench import BenchRunner
    from llmtop.sessions.runners.engines import InterleavedBench

    try:
        runners = [BenchRunner(conn, config, str(log),
                               on_progress=progress_printer(label, args.json),
                               token_timeout_s=args.token_timeout)
                   for conn, label, log in zip(conns, labels, logs, strict=True)]
    except LogError as exc:
        raise UsageError(str(exc), label="llmtop") from None
    for label, runner in zip(labels, runners, strict=True):
        print(f"llmtop bench: {label} · {runner.conn.model} · log {runner.log_path}",
              file=sys.stderr, flush=True)

    def said(r: Round) -> None:
        if not args.json:
            print(f"llmtop bench: round {r.number} [{r.target} tok, {r.phase}]: "
                  + " → ".join(r.order), file=sys.stderr, flush=True)
    return await bench_ended(InterleavedBench(runners, labels, said).run())


def _write_and_report(args: argparse.Namespace, engines: Sequence[FoundEngine],
                      labels: Sequence[str], conns: Sequence[Connection],
                      files: Sequence[ModelFile | None], match: ModelMatch,
                      outcome: InterleavedOutcome, set_file: Path, started: str,
                      version: str) -> int:
    """Write the set's file, say where, print its report (--format/--json, --out); returns
    `exit_code`."""
    from llmtop.commands.output import emit
    from llmtop.sessions.analysis.engine_set import analyze_set
    from llmtop.sessions.records.engine_set import EngineSet, SetEngine, write_set
    from llmtop.sessions.records.log import LogError
    from llmtop.sessions.reports.formats import render

    entries = [SetEngine(label, e.kind, e.url, c.version or e.version, c.model, o.log_path,
                         f, e.found_by)
               for label, e, c, f, o in zip(labels, engines, conns, files, outcome.outcomes,
                                            strict=True)]
    engine_set = EngineSet(entries, match.to_dict(), [r.to_dict() for r in outcome.rounds],
                           outcome.notes, started, version, str(set_file))
    try:
        write_set(engine_set, set_file)
    except LogError as exc:
        raise UsageError(str(exc)) from None
    print(f"llmtop bench: the set: {set_file} (`llmtop report {set_file}`)", file=sys.stderr)
    for note in outcome.notes:
        print(f"llmtop bench: note: {note}", file=sys.stderr)
    analysis = analyze_set(engine_set, [o.log for o in outcome.outcomes])
    fmt = getattr(args, "format", None) or ("json" if args.json else "md")
    emit(render(analysis, fmt), getattr(args, "out", None), "llmtop bench")
    return exit_code(outcome.outcomes)


def main(args: argparse.Namespace, asked: BenchConfig) -> int:
    """`llmtop bench --engines`: check the flags, then run the set (`run_set`) with the
    BenchConfig the command line asked for (`asked`, built by commands.bench); returns an
    ExitCode (0 every engine measured clean or inconclusive, 1 one CONTAMINATED, 3 an item
    no engine answers for, 5 one with no ok request; 128 + the signal's number after
    SIGTERM/SIGHUP). Raises UsageError."""
    from llmtop.commands.stopping import run_stoppable

    check_engine_flags(args)
    return run_stoppable(run_set(args, asked), "llmtop bench")


def exit_code(outcomes: Sequence[BenchOutcome]) -> int:
    """REQUEST_FAILED when an engine completed no request, NOISY when a run was
    CONTAMINATED, else OK."""
    analyses = [o.analysis for o in outcomes]
    if any(a.ok_count == 0 for a in analyses):
        return ExitCode.REQUEST_FAILED
    if any(a.judgement.contaminated for a in analyses):
        return ExitCode.NOISY
    return ExitCode.OK
