"""The composition root: reach an engine, start the children it needs, pick the model.

This is the one module that wires engines, llmtop's child servers, the relay and the probes
together; the commands and the TUI call `connect()` and get a `Connection` (plain data,
`llmtop.engines.connection`). The rule of `llmtop` with no flags: use Ollama at
127.0.0.1:11434 when it answers within 0.5 s (or an OpenAI-compatible server there),
otherwise start the embedded engine as a child process on a free loopback port, and stop it
on `close()`. An address the user gave (`--host`, `$OLLAMA_HOST`) is never replaced: nothing
answering there is UNREACHABLE (exit 3) naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from time import monotonic
from typing import TYPE_CHECKING, Any

import psutil

from llmtop import DISTRIBUTION
from llmtop.engines.base import EngineError
from llmtop.engines.connection import Connection
from llmtop.engines.events import Failure, FailureKind
from llmtop.engines.hosts import resolve_host
from llmtop.engines.http import DEFAULT_CONNECT_TIMEOUT_S
from llmtop.engines.llama_props import flags_from_argv
from llmtop.engines.ollama import OLLAMA_PROBE_TIMEOUT_S, OllamaEngine, ollama_version, version_info
from llmtop.engines.openai import OpenAIEngine, api_base
from llmtop.engines.openai_server import openai_models, server_root
from llmtop.engines.relay import RelayEngine
from llmtop.probes.engine_state import local_engine_pids
from llmtop.servers.child import EmbeddedProcess, autopsy
from llmtop.servers.embedded.model_files import BUNDLED_MODEL_NAME
from llmtop.servers.relay.process import RelayProcess

if TYPE_CHECKING:
    from llmtop.engines.discovery import Discovery, Hint

ENGINES = ("auto", "ollama", "embedded", "openai")
PIDS_REFRESH_S = 5.0  # how long a socket-owner lookup of the engine's pids is reused


async def connect(
    engine: str = "auto",
    host: str | None = None,
    model: str | None = None,
    model_path: str | None = None,
    via: str = "direct",
    relay_url: str | None = None,
    engine_pids: Collection[int] = (),
    api_key: str | None = None,
) -> Connection:
    """Reach an engine per the `--engine` rule and pick the model.

    engine: "auto" (Ollama if `GET /api/version` answers within 0.5 s, else an
    OpenAI-compatible server if `GET {host}/v1/models` does, else embedded), "ollama",
    "embedded" or "openai" (llama-server, LM Studio, vLLM, llama-cpp-python, Ollama's /v1).
    host: the engine's address; with engine "embedded", the address of an embedded engine that
    is already running (`llmtop engine`), else llmtop starts one as a child process.
    api_key: the OpenAI engine's bearer token (default $OPENAI_API_KEY).
    via: "direct", or "relay" to stream through llmtop's SSE relay (the one at `relay_url`,
    else a relay child started in front of the engine).
    engine_pids: pids of the measured engine the user named (`--engine-pid`, `[engine]
    pids`), for the probes; else it is identified (`probes.engine_identity`).
    Raises EngineError (UNREACHABLE, MODEL_NOT_FOUND, BAD_REQUEST) with a remedy; whatever was
    started is stopped again when it raises or is cancelled.
    """
    if engine not in ENGINES:
        raise EngineError(Failure(FailureKind.BAD_REQUEST, f"unknown engine {engine!r}",
                                  "use auto, ollama, embedded or openai"))
    async with contextlib.AsyncExitStack() as undo:
        answered = await look(engine, host, api_key)
        found = await _reach_openai(engine, host, api_key, answered, undo)
        client, version, child = found or await _reach(engine, host, model_path, answered, undo)
        chosen = await _choose_model(client, model)
        info = await client.model_info(chosen)
        conn = Connection(engine=client, model=chosen, info=info, version=version,
                          children=[child] if child else [],
                          engine_config=child.llama_config if child else
                          await _engine_config(client, answered))
        if child is not None:  # a request that breaks asks whether the engine died, and how
            client.autopsy = autopsy([child])
        if via == "relay":
            conn = await via_relay(conn, relay_url)
        conn.find_engine_pids = _pid_finder(conn, engine_pids)
        if isinstance(conn.engine_config, dict) and conn.engine_config.get("server") == (
                "llama-server"):
            conn.engine_config["flags"] = await asyncio.to_thread(_server_flags, conn)
        undo.pop_all()  # success: the connection owns everything now
        return conn
    raise AssertionError("unreachable")  # pragma: no cover - the stack re-raises or returns


@dataclass(frozen=True, slots=True)
class Answered:
    """What the engine's address answered to the one look `connect` takes before it chooses
    (`look`): ollama, the object of Ollama's `GET /api/version` (llmtop's embedded engine
    adds `llama_config`); openai, the model ids of an OpenAI-compatible `GET /v1/models`.
    None: not asked, or no such answer."""

    ollama: dict[str, Any] | None = None
    openai: list[str] | None = None

    @property
    def version(self) -> str | None:
        """The Ollama-API server's version ("unknown" when its answer names none)."""
        return None if self.ollama is None else str(self.ollama.get("version", "unknown"))


async def look(engine: str, host: str | None, api_key: str | None = None) -> Answered:
    """Ask the engine's address, each question once and all at the same time, what `engine`
    needs to choose: "auto" asks Ollama's /api/version (within `_look_s`) and /v1/models
    (within openai_server.PROBE_TIMEOUT_S) together, so a missing one costs one timeout, not
    two in a row; "ollama", and "embedded" at a given address, /api/version; "openai" and
    "embedded" without an address nothing (the OpenAI client's `version()` is its question;
    llmtop starts its own embedded engine). Never raises: no answer is None."""
    target = resolve_host(host)
    if engine == "auto":
        ollama, openai = await asyncio.gather(version_info(target, _look_s(engine, host)),
                                              openai_models(api_base(target), api_key))
        return Answered(ollama, openai)
    if engine == "ollama":
        return Answered(await version_info(target, _look_s(engine, host)))
    if engine == "embedded" and host:
        return Answered(await version_info(target, timeout_s=5.0))
    return Answered()


async def _reach_openai(
    engine: str, host: str | None, api_key: str | None, answered: Answered,
    undo: contextlib.AsyncExitStack,
) -> tuple[OpenAIEngine, str | None, None] | None:
    """The OpenAI engine when `engine` is "openai", or "auto" found no Ollama at `host` but an
    OpenAI-compatible server listing models at `{host}/v1/models` (`answered`); else None.
    The engine's name says what answered ("openai: llama-server", "auto → openai: vllm")."""
    if engine not in ("openai", "auto"):
        return None
    target = resolve_host(host)
    base = api_base(target)
    if engine == "auto" and (answered.ollama is not None or answered.openai is None):
        return None
    client = OpenAIEngine(base, api_key=api_key)
    undo.push_async_callback(client.aclose)
    # the look asked the server's root for Ollama's /api/version: not asked again
    known = ({"/api/version": answered.ollama}
             if engine == "auto" and server_root(target) == target.rstrip("/") else None)
    try:
        version = await client.version(known)
    except EngineError as exc:
        if exc.failure.kind != FailureKind.UNREACHABLE:
            if engine == "openai" and await ollama_version(resolve_host(host), 2.0):
                # the wrong kind of engine, not a request that failed (else
                # exit 5 "the request started but did not complete", though none started)
                raise EngineError(Failure(
                    FailureKind.BAD_REQUEST,
                    f"an Ollama-API engine answers at {resolve_host(host)}, not an "
                    f"OpenAI-compatible server ({exc.failure.message})",
                    "drop --engine openai (auto finds it), or pass --engine ollama",
                )) from exc
            raise
        raise EngineError(client.unreachable(f"no answer to {base}/models")) from exc
    kind = client.kind.kind if client.kind is not None else "openai-compatible"
    client.name = f"{'auto → ' if engine == 'auto' else ''}openai: {kind}"
    return client, version, None


async def _reach(
    engine: str, host: str | None, model_path: str | None, answered: Answered,
    undo: contextlib.AsyncExitStack,
) -> tuple[OllamaEngine, str | None, EmbeddedProcess | None]:
    """The client, the version it reported (`answered`), and the embedded child when one was
    started; each registered on `undo` so a later failure closes it."""
    target = resolve_host(host)
    version = answered.version
    if version is None and engine == "ollama":
        raise EngineError(OllamaEngine(target).unreachable("no answer to /api/version"))
    child = None
    given = _given_host(host)
    if version is None and engine == "auto" and given is not None:
        # An address the user gave is never silently replaced by the embedded engine.
        missing = EmbeddedProcess.missing(model_path)
        # "pass --engine embedded" with the address still given looked there again and failed
        # without the address llmtop starts its own
        drop = "drop --host" if given == "--host" else f"unset {given}"
        instead = (f"to measure llmtop's embedded engine instead, {drop} (llmtop then starts "
                   "it)" if missing is None else
                   f"the embedded engine is not installed here ({missing} missing): "
                   f"`pipx install '{DISTRIBUTION}[embedded]'` (from a checkout: "
                   "`pip install '.[embedded]'`)")
        unresolved = await asyncio.to_thread(_unresolvable, target)
        what = (f"{target} (from {given}): {unresolved}" if unresolved else
                f"{target} (from {given}): neither Ollama's /api/version nor an "
                "OpenAI-compatible /v1/models")
        raise EngineError(Failure(
            FailureKind.UNREACHABLE,
            f"no engine answers at {what}",
            f"start your engine there or correct {given}; {instead}",
        ))
    if engine == "embedded" and host:  # one that is already running: use it, start nothing
        if version is None:
            raise EngineError(Failure(
                FailureKind.UNREACHABLE,
                f"no embedded engine answers at {target}",
                "start one with `llmtop engine --port PORT`, or drop --host to let llmtop start it",
            ))
        client = OllamaEngine(target, name="embedded")
    elif version is not None:
        client = OllamaEngine(target, name="ollama")
    else:
        EmbeddedProcess.require(model_path, tried=target if engine == "auto" else None)
        child = EmbeddedProcess(model_path=model_path)
        undo.callback(child.stop)  # also when start() is cancelled (the user quit meanwhile)
        await child.start()
        client = OllamaEngine(child.host, name="embedded")
        version = child.version  # read once by start()
    undo.push_async_callback(client.aclose)
    return client, version, child


async def _engine_config(client: OllamaEngine | OpenAIEngine, answered: Answered
                         ) -> dict[str, Any] | None:
    """The embedded engine's llama.cpp configuration (its `/api/version`'s `llama_config`, as
    `look` read it), llama-server's (its `/props` and `/slots`: `engines.llama_props`), None
    for any other engine."""
    if isinstance(client, OpenAIEngine):
        return await client.server_config()
    if client.name != "embedded":
        return None
    config = (answered.ollama or {}).get("llama_config")
    return config if isinstance(config, dict) else None


def _look_s(engine: str, host: str | None) -> float:
    """How long to wait for `/api/version`: auto with no address given only looks (0.5 s,
    then starts the embedded engine); an engine or an address the user named gets the connect
    timeout, so a loaded machine's slow answer is not taken for no engine."""
    if engine == "auto" and _given_host(host) is None:
        return OLLAMA_PROBE_TIMEOUT_S
    return DEFAULT_CONNECT_TIMEOUT_S


def _unresolvable(url: str) -> str | None:
    """Why `url`'s host name does not resolve ("the name nosuchhost.invalid does not resolve
    (DNS: …)"), or None when it does or is an address (a typo'd name otherwise
    read as "no engine answers")."""
    import socket
    from urllib.parse import urlsplit

    name = urlsplit(url).hostname
    if not name:
        return None
    try:
        socket.getaddrinfo(name, None)
    except socket.gaierror as exc:
        return f"the name {name} does not resolve (DNS: {exc.strerror or exc})"
    except OSError:
        return None
    return None


def _given_host(host: str | None) -> str | None:
    """Where an engine address the user chose came from ("--host", "OLLAMA_HOST"), or None
    when none was given (then, and only then, `auto` may start the embedded engine)."""
    if host:
        return "--host"
    if os.environ.get("OLLAMA_HOST", "").strip():
        return "OLLAMA_HOST"
    return None


async def via_relay(conn: Connection, relay_url: str | None = None) -> Connection:
    """The same connection, streaming through llmtop's SSE relay: the one at `relay_url`, or
    a relay child started in front of `conn`'s engine. Raises EngineError when it won't start."""
    children = list(conn.children)
    openai = isinstance(conn.engine, OpenAIEngine)
    if relay_url is None:
        relay = RelayProcess(conn.engine.host, api="openai" if openai else "ollama")
        try:
            await relay.start()
        except BaseException:
            relay.stop()
            raise
        children.append(relay)
        relay_url = relay.url
    client = RelayEngine(relay_url, name=f"{conn.engine.name} via relay", upstream=conn.engine.host,
                         metadata=conn.engine if openai else None)
    if children:
        client.autopsy = autopsy(children)
    return Connection(engine=client, model=conn.model, info=conn.info, version=conn.version,
                      upstream_client=conn.engine, children=children,
                      engine_config=conn.engine_config)


def _server_flags(conn: Connection) -> dict[str, Any]:
    """llama-server's configuration flags from its process's command line
    (`llama_props.flags_from_argv`), with the pid read; {"source": why not} when no local
    llama-server process can be read (a remote one, another user's)."""
    for pid in sorted(conn.engine_pids):
        try:
            argv = psutil.Process(pid).cmdline()
        except (psutil.Error, OSError):
            continue
        if argv and "llama-server" in os.path.basename(argv[0]):
            return {**flags_from_argv(argv[1:]), "source": f"command line of pid {pid}"}
    return {"source": "not read: no local llama-server process whose command line this user "
                      "can see"}


def descendants(pids: Collection[int], proc: str = "/proc") -> set[int]:
    """Every descendant of `pids` alive now. On Linux from each thread's
    `/proc/PID/task/TID/children` (tens of µs for a few processes); where that file is
    missing (another OS, a kernel without CONFIG_PROC_CHILDREN) psutil's scan of the whole
    table (~1 ms for 70 processes). A process that is gone or unreadable has none."""
    out: set[int] = set()
    todo = list(pids)
    while todo:
        pid = todo.pop()
        found = _children_from_proc(pid, proc)
        if found is None:
            with contextlib.suppress(psutil.Error):
                out.update(p.pid for p in psutil.Process(pid).children(recursive=True))
            continue
        fresh = found - out
        out |= fresh
        todo.extend(fresh)
    return out


def _children_from_proc(pid: int, proc: str) -> set[int] | None:
    """Direct children of `pid` from procfs; None when procfs cannot say (no such files)."""
    try:
        tids = os.listdir(f"{proc}/{pid}/task")
    except FileNotFoundError:
        return set() if os.path.isdir(proc) and os.path.exists(f"{proc}/self/task") else None
    except OSError:
        return set()
    out: set[int] = set()
    for tid in tids:
        try:
            with open(f"{proc}/{pid}/task/{tid}/children", encoding="ascii") as fh:
                out.update(int(w) for w in fh.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"{proc}/{pid}/task/{tid}"):
                continue  # the thread ended meanwhile
            return None  # the kernel has no children files
        except (OSError, ValueError):
            continue
    return out


def _pid_finder(conn: Connection, pinned: Collection[int]) -> Callable[[], set[int]]:
    """How the probes find the measured engine: the children llmtop started, else the pids
    the user named or the engine identified without privileges (socket owner, socket user,
    catalogue; `probes.engine_identity`), with their children (Ollama's runners), looked up
    at most every PIDS_REFRESH_S seconds (an identification costs ~30 ms of CPU)."""
    host = conn.upstream.host
    started_engine = any(isinstance(c, EmbeddedProcess) for c in conn.children)
    cache: list[tuple[float, set[int]]] = []

    def children_pids() -> set[int]:
        return {pid for c in conn.children if (pid := c.pid)}

    def started_pids() -> set[int]:
        """The children llmtop started and their descendants: the embedded engine's
        self-test trials are its children, and were counted as another engine, busy, in
        the preflight of the bench that started it."""
        started = children_pids()
        return started | descendants(started)

    def find() -> set[int]:
        if started_engine:
            return started_pids()
        now = monotonic()
        if not cache or now - cache[0][0] > PIDS_REFRESH_S:
            cache[:] = [(now, local_engine_pids(host, pinned or None))]
        return cache[0][1] | children_pids()

    return find


def _same_model(a: str, b: str) -> bool:
    """Ollama's comparison of model names: case-insensitive, and a name without a tag means
    `:latest` ("Qwen2.5" is "qwen2.5:latest")."""

    def norm(name: str) -> str:
        name = name.strip().lower()
        return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"

    return norm(a) == norm(b)


async def _choose_model(client: OllamaEngine | OpenAIEngine, wanted: str | None) -> str:
    """The installed model matching `wanted` (as the engine spells it), else the bundled model
    when installed, else the first. Raises EngineError MODEL_NOT_FOUND listing what is there,
    with the closest installed name ("did you mean gemma3:270m?", difflib's ratio ≥ 0.6) and
    advice that fits the engine: `ollama pull` only for Ollama; the embedded engine serves
    one model (its own, or --model-path); an OpenAI-compatible server serves what it started
    with."""
    installed = await client.list_models()
    if wanted:
        for name in installed:
            if _same_model(name, wanted):
                return name
        listing = ", ".join(installed) or "none"
        close = difflib.get_close_matches(wanted, installed, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        if isinstance(client, OpenAIEngine):
            where, remedy = f"at {client.host}", (
                "pick a served one with --model (the server chose what it serves when it "
                "started)")
        elif client.name == "embedded":
            where, remedy = "in the embedded engine", (
                "the embedded engine serves one model: leave --model out for it, or serve "
                "another GGUF with --model-path FILE.gguf")
        else:
            where, remedy = f"at {client.host}", (
                f"pull it with `ollama pull {wanted}` or pick an installed one with --model")
        raise EngineError(Failure(
            FailureKind.MODEL_NOT_FOUND,
            f"model '{wanted}' not found {where} (installed: {listing}){hint}", remedy,
        ))
    if not installed:
        raise EngineError(Failure(
            FailureKind.MODEL_NOT_FOUND,
            f"no models installed at {client.host}",
            f"pull one with `ollama pull {BUNDLED_MODEL_NAME}`, or use --engine embedded",
        ))
    return BUNDLED_MODEL_NAME if BUNDLED_MODEL_NAME in installed else installed[0]


def socket_hints() -> tuple[list[Hint], str | None]:
    """The OS's listening sockets as discovery hints, and what could not be seen
    (`probes.listening.scan`; blocking, ~10-50 ms: discovery runs it in a thread)."""
    from llmtop.engines.discovery import Hint
    from llmtop.probes import listening

    found = listening.scan()
    return ([Hint(s.address, s.port, s.pid, s.process, s.engine, s.how)
             for s in found.listeners], found.note)


async def find_engines(extra_ports: Sequence[int] = (), sockets: bool = True) -> Discovery:
    """Every engine answering here: on the usual ports and `extra_ports`, and (with
    `sockets`) on the ports of known engine processes' listening sockets — what `llmtop
    engines` lists, `bench --engines` resolves its items against and the TUI's picker
    offers; `run`'s note of other engines asks without the sockets (it waits 0.3 s at most)."""
    from llmtop.engines.discovery import KNOWN_PORTS, discover

    return await discover([*KNOWN_PORTS, *extra_ports], scan=socket_hints if sockets else None)
