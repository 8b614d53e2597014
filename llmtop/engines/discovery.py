"""Every LLM engine answering on this machine, found by itself (`llmtop engines`).

`discover` knocks on the engines' usual ports (`KNOWN_PORTS`, on loopback: 127.0.0.1, then
::1 where 127.0.0.1 refuses) and on the ports of listening sockets the caller names
(`Hint`: the composition above reads them from the OS, `llmtop.probes.listening`), all at
once. A port that accepts a connection is asked, in parallel, the routes only one kind of
server answers (docs/protocols.md, "OpenAI-compatible servers"):

| route                  | answer                                         | kind              |
|------------------------|------------------------------------------------|-------------------|
| GET /api/extra/version | `{"result": "KoboldCpp", "version": …}`        | koboldcpp         |
| GET /api/version       | `{"version": …, "engine": "llmtop-embedded"}`  | llmtop-embedded   |
| GET /api/version       | `{"version": …}`                               | ollama            |
| GET /props             | `{"build_info": …}`                            | llama-server      |
| GET /api/v0/models     | `{"data": [… "state": "loaded" …]}`            | lm-studio         |
| GET /api/v1/models     | `{"models": [… "loaded_instances" …]}`         | lm-studio (0.4+)  |
| GET /get_model_info    | `{"model_path": …}`                            | sglang            |
| GET /version           | `{"version": …}` and a `/v1/models` list       | vllm              |
| GET /v1/models         | a list whose `owned_by` names the server       | that server       |
| GET /openapi.json      | `info.title` naming "llama.cpp Python"         | llama-cpp-python  |
| GET /v1/models         | any other model list                           | openai-compatible |

first match wins, in that order (KoboldCpp also answers parts of Ollama's API; vLLM's
`/version` alone is what many web apps answer, so it needs the model list too). Then the
models: Ollama's `/api/tags` (installed) and `/api/ps` (loaded); llama-server's `/props`
(`llama_props.config_from`) and `/v1/models`; LM Studio's `state`/`loaded_instances`; the
others' `/v1/models` (what vLLM, SGLang, llama-cpp-python and llama-server list is what they
serve: loaded; a generic server's list says nothing of what is in memory: available).

Time: a port nobody listens on refuses in microseconds; a connect waits at most
CONNECT_TIMEOUT_S, each route PROBE_TIMEOUT_S, and everything together DEADLINE_S (a port
still talking then is named as such, not waited for). What a server says is text from
outside: every reply is read through `stamping.bounds.BoundedTransport` (no compression
asked; gzip or deflate sent anyway decoded in bounded pieces; another encoding refused), a
body past MAX_BODY_BYTES is no answer, and names and versions are kept only up to their
bounds (MAX_LABEL_CHARS, MAX_MODELS), the rest set aside in the engine's notes. Never raises.
"""

from __future__ import annotations

import asyncio
import json
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any

import httpx

from llmtop.engines import llama_props
from llmtop.stamping.bounds import BoundedTransport, read_whole

# port → the engines that listen there by default (their own documentation)
KNOWN_PORTS: dict[int, str] = {
    11434: "Ollama",
    11435: "llmtop engine",
    1234: "LM Studio",
    8080: "llama.cpp's llama-server, llamafile, LocalAI, mlx_lm.server",
    8000: "vLLM, llama-cpp-python",
    5001: "KoboldCpp",
    1337: "Jan",
    30000: "SGLang",
}
LOOPBACK = ("127.0.0.1", "::1")
CONNECT_TIMEOUT_S = 0.3  # a local accept takes microseconds; a firewall's drop is not waited out
PROBE_TIMEOUT_S = 0.5  # one route's whole answer, body included: a local engine's take ms
DEADLINE_S = 2.0  # everything: a port still talking after this is named, not waited for
MAX_BODY_BYTES = 2 * 2**20  # vLLM's /openapi.json is ~0.2 MB; a longer body is not read
MAX_LABEL_CHARS = 256  # a version or a model name; PATH_MAX-long names are no one's
MAX_MODELS = 1000  # names kept per list; more are counted, not kept
SIGNATURE_ROUTES = ("/api/extra/version", "/api/version", "/props", "/api/v0/models",
                    "/api/v1/models", "/get_model_info", "/version", "/v1/models")
OPENAI_OWNERS = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llama-server",
                 "koboldcpp": "koboldcpp"}
OLLAMA_API = ("ollama", "llmtop-embedded")
# kinds whose /v1/models lists only what they serve now (the model is loaded)
SERVES_LISTED = ("llama-server", "vllm", "sglang", "llama-cpp-python", "koboldcpp")


@dataclass(frozen=True, slots=True)
class Hint:
    """A listening socket the caller found: address (to reach it from here), port, its
    owner's pid and process name where known, and whether the owner is a known engine
    (only those are probed beyond the usual ports; the others only name a port's owner)."""

    address: str
    port: int
    pid: int | None = None
    process: str | None = None
    engine: bool = False
    how: str = "listening socket"


@dataclass(frozen=True, slots=True)
class FoundEngine:
    """One engine that answered.

    kind: "ollama", "llmtop-embedded", "llama-server", "vllm", "sglang", "lm-studio",
    "koboldcpp", "llama-cpp-python" or "openai-compatible". url: its root
    ("http://127.0.0.1:8080"). version: what it reports (None: it reports none).
    loaded / available: model names in memory / installed or listed; None when the engine
    does not say (absent, not none). pid / process: the socket's owner where the OS shows
    it. found_by: "port 8080 (usual for …)" or "listening socket of llama.cpp (pid 900)".
    notes: what was set aside or could not be read.
    """

    kind: str
    url: str
    version: str | None = None
    loaded: tuple[str, ...] | None = None
    available: tuple[str, ...] | None = None
    pid: int | None = None
    process: str | None = None
    found_by: str = ""
    notes: tuple[str, ...] = ()

    @property
    def api(self) -> str:
        """"ollama" (Ollama's native API) or "openai" (an OpenAI-compatible /v1)."""
        return "ollama" if self.kind in OLLAMA_API else "openai"

    @property
    def host(self) -> str:
        """The value for `--host`: the root for Ollama's API, the root + "/v1" otherwise."""
        return self.url if self.api == "ollama" else f"{self.url}/v1"

    @property
    def model(self) -> str | None:
        """The model to measure it with: the first loaded, else the first available."""
        for names in (self.loaded, self.available):
            if names:
                return names[0]
        return None

    def flags(self) -> str:
        """The flags that measure this engine: "--engine ollama --host URL --model M",
        "--engine embedded --host URL …" or "--engine openai --host URL/v1 --model M"
        (shell-quoted; no --model when it lists none)."""
        engine = {"ollama": "ollama", "llmtop-embedded": "embedded"}.get(self.kind, "openai")
        parts = ["--engine", engine, "--host", self.host]
        if self.model is not None:
            parts += ["--model", self.model]
        return " ".join(shlex.quote(p) for p in parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: kind, version, url, api, host (the `--host` value), loaded,
        available, model, pid, process, found_by, flags, notes."""
        return {"kind": self.kind, "version": self.version, "url": self.url, "api": self.api,
                "host": self.host, "loaded": _listed(self.loaded),
                "available": _listed(self.available), "model": self.model, "pid": self.pid,
                "process": self.process, "found_by": self.found_by, "flags": self.flags(),
                "notes": list(self.notes)}


@dataclass(frozen=True, slots=True)
class Discovery:
    """What `discover` found: the engines (in port order), the ports that accepted a
    connection but answered no engine's route ("127.0.0.1:8080: …"), the ports probed, the
    caller's notes (what the socket scan could not see) and how long it took (ms)."""

    engines: tuple[FoundEngine, ...] = ()
    others: tuple[str, ...] = ()
    probed: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()
    elapsed_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: engines, others, probed, notes, elapsed_ms."""
        return {"engines": [e.to_dict() for e in self.engines], "others": list(self.others),
                "probed": list(self.probed), "notes": list(self.notes),
                "elapsed_ms": round(self.elapsed_ms, 1)}


@dataclass(slots=True)
class _Target:
    """A port to probe, with what is known of it beforehand."""

    port: int
    addresses: tuple[str, ...]
    found_by: str
    hint: Hint | None = None
    owners: dict[int, Hint] = field(default_factory=dict)


def _listed(names: tuple[str, ...] | None) -> list[str] | None:
    return None if names is None else list(names)


def root_url(address: str, port: int) -> str:
    """"http://127.0.0.1:8080", "http://[::1]:8080"."""
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}"


async def discover(
    ports: Iterable[int] = KNOWN_PORTS,
    *,
    scan: Callable[[], tuple[Sequence[Hint], str | None]] | None = None,
    addresses: Sequence[str] = LOOPBACK,
    deadline_s: float = DEADLINE_S,
) -> Discovery:
    """The engines answering on `ports` (on `addresses`, in order: the next only where the
    previous refuses) and, when `scan` is given, on the ports of the engine sockets it
    returns ((hints, note): run in a thread while the ports are probed; its other sockets
    name the owner of a port that answered). Returns within about `deadline_s` seconds.
    Never raises."""
    start = perf_counter_ns()
    wanted = sorted({int(p) for p in ports if 0 < int(p) < 65536})
    targets = {p: _Target(p, tuple(addresses), _usual(p)) for p in wanted}
    notes: list[str] = []
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=16)
    async with httpx.AsyncClient(trust_env=False, transport=BoundedTransport(limits=limits),
                                 timeout=httpx.Timeout(PROBE_TIMEOUT_S,
                                                       connect=CONNECT_TIMEOUT_S)) as client:
        tasks = {p: asyncio.create_task(_probe_port(client, t)) for p, t in targets.items()}
        owners: dict[int, Hint] = {}
        if scan is not None:
            hints, note = await _scan(scan, deadline_s)
            if note:
                notes.append(note)
            for hint in hints:
                owners.setdefault(hint.port, hint)
                if hint.engine and hint.port not in targets:
                    target = _Target(hint.port, (hint.address,), _socket_of(hint), hint)
                    targets[hint.port] = target
                    tasks[hint.port] = asyncio.create_task(_probe_port(client, target))
        left = deadline_s - (perf_counter_ns() - start) / 1e9
        _done, pending = await asyncio.wait(tasks.values(), timeout=max(left, 0.05))
        for task in pending:
            task.cancel()
        found, others = _collect(tasks, targets, owners, pending)
    elapsed = (perf_counter_ns() - start) / 1e6
    return Discovery(tuple(found), tuple(others), tuple(sorted(targets)), tuple(notes), elapsed)


async def _scan(scan: Callable[[], tuple[Sequence[Hint], str | None]], deadline_s: float
                ) -> tuple[Sequence[Hint], str | None]:
    """The caller's socket scan, in a thread, within the deadline; a scan that fails or
    takes longer is a note, never an error."""
    try:
        async with asyncio.timeout(deadline_s / 2):
            return await asyncio.to_thread(scan)
    except TimeoutError:
        return (), f"the socket scan took over {deadline_s / 2:.1f} s: only the usual ports"
    except Exception as exc:  # noqa: BLE001 - the scan is a convenience: never an error
        return (), f"the socket scan failed ({type(exc).__name__}): only the usual ports"


def _collect(tasks: Mapping[int, asyncio.Task[FoundEngine | str | None]],
             targets: Mapping[int, _Target], owners: Mapping[int, Hint],
             pending: set[asyncio.Task[FoundEngine | str | None]]
             ) -> tuple[list[FoundEngine], list[str]]:
    """The engines (named with their socket's owner) and the other answers, in port order."""
    found: list[FoundEngine] = []
    others: list[str] = []
    for port in sorted(tasks):
        task = tasks[port]
        if task in pending:
            others.append(f"port {port}: still answering after {DEADLINE_S:g} s, not waited for")
            continue
        if task.cancelled() or task.exception() is not None:
            error = None if task.cancelled() else task.exception()
            others.append(f"port {port}: the probe failed ({type(error).__name__})")
            continue
        result = task.result()
        if isinstance(result, FoundEngine):
            owner = targets[port].hint or owners.get(port)
            if owner is not None and owner.pid is not None:
                result = _with_owner(result, owner)
            found.append(result)
        elif isinstance(result, str):
            others.append(result)
    return found, others


def _with_owner(engine: FoundEngine, owner: Hint) -> FoundEngine:
    return FoundEngine(engine.kind, engine.url, engine.version, engine.loaded, engine.available,
                       owner.pid, owner.process, engine.found_by, engine.notes)


def _usual(port: int) -> str:
    usual = KNOWN_PORTS.get(port)
    return f"port {port} (usual for {usual})" if usual else f"port {port} (asked for)"


def _socket_of(hint: Hint) -> str:
    who = hint.process or "an engine"
    pid = f" (pid {hint.pid})" if hint.pid is not None else ""
    if hint.how != "listening socket":
        return f"port {hint.port}: {hint.how} of {who}{pid}"
    return f"listening socket of {who}{pid}"


async def _probe_port(client: httpx.AsyncClient, target: _Target) -> FoundEngine | str | None:
    """The engine on `target`'s port at its first address that accepts a connection; a
    line when something there accepts but answers no engine's route; None when all refuse."""
    for address in target.addresses:
        if not await _accepts(address, target.port):
            continue
        root = root_url(address, target.port)
        answers = dict(zip(SIGNATURE_ROUTES, await asyncio.gather(
            *(fetch_json(client, root + route) for route in SIGNATURE_ROUTES)), strict=True))
        found = await identify(client, root, answers)
        if found is None:
            return (f"{root}: accepts connections but answers none of the engines' routes "
                    "(not an LLM engine, or one llmtop does not know)")
        kind, version, notes = found
        loaded, available, more = await models_of(client, root, kind, answers)
        return FoundEngine(kind, root, version, loaded, available, found_by=target.found_by,
                           notes=(*notes, *more))
    return None


async def _accepts(address: str, port: int) -> bool:
    """Whether a TCP connection to address:port opens within CONNECT_TIMEOUT_S."""
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            _, writer = await asyncio.open_connection(address, port)
    except (OSError, TimeoutError):
        return False
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass
    return True


async def fetch_json(client: httpx.AsyncClient, url: str,
                     timeout_s: float = PROBE_TIMEOUT_S) -> Any:
    """The JSON body of a GET of `url`, or None: another status, a transport error, no whole
    answer within `timeout_s` seconds (body included: a server that trickles bytes is not
    waited for), a body over MAX_BODY_BYTES, or one that is not JSON. Never raises."""
    body = await read_whole(client, url, timeout_s, MAX_BODY_BYTES)
    if body is None:
        return None
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


async def identify(client: httpx.AsyncClient, root: str, answers: Mapping[str, Any]
                   ) -> tuple[str, str | None, tuple[str, ...]] | None:
    """(kind, version, notes) from the signature routes' answers (the module table), asking
    `/openapi.json` only when nothing else named the server; None when nothing did and no
    model list answered either."""
    found = classify(answers)
    if found is None and _model_entries(answers.get("/v1/models")) is not None:
        spec = await fetch_json(client, root + "/openapi.json")
        info = spec.get("info") if isinstance(spec, dict) else None
        if isinstance(info, dict) and "llama.cpp python" in str(info.get("title", "")).lower():
            found = ("llama-cpp-python", info.get("version"))
        else:
            found = ("openai-compatible", None)
    if found is None:
        return None
    kind, raw_version = found
    notes: list[str] = []
    return kind, label(raw_version, "version", notes), tuple(notes)


def classify(answers: Mapping[str, Any]) -> tuple[str, Any] | None:
    """(kind, the version as it came) from the signature routes' answers (route → JSON, None
    for no answer), first match in the module table's order; None when no signature route
    matched (a bare model list is `identify`'s to tell). Pure."""
    kobold = answers.get("/api/extra/version")
    if isinstance(kobold, dict) and str(kobold.get("result", "")).lower() == "koboldcpp":
        return "koboldcpp", kobold.get("version")
    ollama = answers.get("/api/version")
    if isinstance(ollama, dict) and "version" in ollama:
        embedded = ollama.get("engine") == "llmtop-embedded"
        return ("llmtop-embedded" if embedded else "ollama"), ollama["version"]
    props = answers.get("/props")
    if isinstance(props, dict) and "build_info" in props:
        return "llama-server", props["build_info"]
    v0, v1 = answers.get("/api/v0/models"), answers.get("/api/v1/models")
    if (isinstance(v0, dict) and isinstance(v0.get("data"), list)) or (
            isinstance(v1, dict) and isinstance(v1.get("models"), list)):
        return "lm-studio", None
    info = answers.get("/get_model_info")
    version = answers.get("/version")
    version = version.get("version") if isinstance(version, dict) else None
    if isinstance(info, dict) and "model_path" in info:
        return "sglang", version
    entries = _model_entries(answers.get("/v1/models"))
    if entries is None:
        return None
    if version is not None:
        return "vllm", version
    owners = {str(e.get("owned_by", "")).lower() for e in entries}
    for owner, kind in OPENAI_OWNERS.items():
        if owner in owners:
            return kind, None
    return None


def _model_entries(listing: Any) -> list[dict[str, Any]] | None:
    """The entries of an OpenAI `{"data": [...]}` model list, or None when it is not one."""
    data = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(data, list):
        return None
    return [e for e in data if isinstance(e, dict)]


def label(value: Any, what: str, notes: list[str]) -> str | None:
    """`value` as a short text: None stays None; a text past MAX_LABEL_CHARS (or anything
    not a text, number or None) is set aside with a line in `notes`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        notes.append(f"{what}: not a text ({type(value).__name__}), set aside")
        return None
    text = str(value)
    if len(text) > MAX_LABEL_CHARS:
        notes.append(f"{what}: {len(text)} characters, over {MAX_LABEL_CHARS}: set aside")
        return None
    return text


def names(values: Iterable[Any], what: str, notes: list[str]) -> tuple[str, ...]:
    """The model names among `values`, each a text of at most MAX_LABEL_CHARS, at most
    MAX_MODELS of them; what is dropped is counted in `notes`."""
    kept: list[str] = []
    dropped = extra = 0
    for value in values:
        if not isinstance(value, str) or not value or len(value) > MAX_LABEL_CHARS:
            dropped += 1
        elif len(kept) >= MAX_MODELS:
            extra += 1
        elif value not in kept:
            kept.append(value)
    if dropped:
        notes.append(f"{what}: {dropped} entr{'ies' if dropped != 1 else 'y'} without a "
                     f"usable name (not a text of 1 to {MAX_LABEL_CHARS} characters), left out")
    if extra:
        notes.append(f"{what}: {extra} more beyond the first {MAX_MODELS}, not listed")
    return tuple(kept)


async def models_of(client: httpx.AsyncClient, root: str, kind: str,
                    answers: Mapping[str, Any]
                    ) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None, tuple[str, ...]]:
    """(loaded, available, notes) for an engine of `kind` at `root` (the module docstring
    says which route gives which); None where the engine does not say."""
    notes: list[str] = []
    if kind in OLLAMA_API:
        tags, ps = await asyncio.gather(fetch_json(client, root + "/api/tags"),
                                        fetch_json(client, root + "/api/ps"))
        return (_ollama_names(ps, "/api/ps", notes), _ollama_names(tags, "/api/tags", notes),
                tuple(notes))
    if kind == "lm-studio":
        return (*_lm_studio(answers, notes), tuple(notes))
    entries = _model_entries(answers.get("/v1/models"))
    listed = (None if entries is None else
              names((e.get("id") for e in entries), "/v1/models", notes))
    if kind == "llama-server":
        config = llama_props.config_from(answers.get("/props"), None)
        notes.extend(config.get("set_aside", ()))
        if llama_props.is_router(answers.get("/props")):
            return _router_models(entries, notes), listed, tuple(notes)
        return listed, None, tuple(notes)
    if kind in SERVES_LISTED:
        return listed, None, tuple(notes)
    return None, listed, tuple(notes)


def _ollama_names(answer: Any, what: str, notes: list[str]) -> tuple[str, ...] | None:
    """The model names of an Ollama `{"models": [{"name": …}]}` answer; None: no answer."""
    models = answer.get("models") if isinstance(answer, dict) else None
    if not isinstance(models, list):
        if answer is not None:
            notes.append(f"{what}: not a model list, set aside")
        return None
    return names((m.get("name") or m.get("model") if isinstance(m, dict) else None
                  for m in models), what, notes)


def _lm_studio(answers: Mapping[str, Any], notes: list[str]
               ) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
    """LM Studio's (loaded, available): v0's `state` ("loaded" / "not-loaded"), else v1's
    `loaded_instances` (LM Studio 0.4+)."""
    v0 = answers.get("/api/v0/models")
    data = v0.get("data") if isinstance(v0, dict) else None
    if isinstance(data, list):
        entries = [e for e in data if isinstance(e, dict)]
        loaded = names((e.get("id") for e in entries if e.get("state") == "loaded"),
                       "/api/v0/models", notes)
        return loaded, names((e.get("id") for e in entries), "/api/v0/models", notes)
    v1 = answers.get("/api/v1/models")
    models = v1.get("models") if isinstance(v1, dict) else None
    entries = [e for e in models if isinstance(e, dict)] if isinstance(models, list) else []
    loaded = names((e.get("key") for e in entries if e.get("loaded_instances")),
                   "/api/v1/models", notes)
    return loaded, names((e.get("key") for e in entries), "/api/v1/models", notes)


def _router_models(entries: list[dict[str, Any]] | None, notes: list[str]
                   ) -> tuple[str, ...] | None:
    """A llama-server router's loaded models: the /v1/models entries whose `status.value`
    is "loaded" (None when the list says no status)."""
    if entries is None:
        return None
    statuses = [(e.get("id"), e.get("status")) for e in entries]
    if not any(isinstance(s, dict) for _, s in statuses):
        return None
    return names((i for i, s in statuses if isinstance(s, dict) and s.get("value") == "loaded"),
                 "/v1/models", notes)


def others_line(found: Discovery, in_use: str | None) -> str | None:
    """One line naming the engines that answer besides the one at `in_use` (a root or API
    URL), each with the flags that measure it: "other engines answer here: llama-server
    b6500 at http://127.0.0.1:8080 (--engine openai --host … --model …); …"; None when
    there are none."""
    used = in_use.rstrip("/").removesuffix("/v1") if in_use else None
    rest = [e for e in found.engines if e.url != used]
    if not rest:
        return None
    parts = [f"{e.kind}{' ' + e.version if e.version else ''} at {e.url} ({e.flags()})"
             for e in rest]
    return (f"other engine{'s' if len(rest) != 1 else ''} answer{'' if len(rest) != 1 else 's'}"
            f" here: {'; '.join(parts)} — `llmtop engines` lists them")
