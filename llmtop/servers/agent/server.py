"""The agent's app: this machine's probe samples over HTTP, read-only (routes: probes/wire.py).

One `ProbeSampler` runs for the agent's lifetime (so every client gets primed CPU readings):
every `interval_s` while a stream is open, every IDLE_INTERVAL_S otherwise (the agent's own
cost on the machine it watches); each sample is encoded once and fanned out to every stream. The
measured engine is the
one at `engine_host` on this machine: its processes are identified (`identify_engine`) and
its `/api/ps` read every ENGINE_POLL_S, and both go into every sample as they would locally.

Security (docs/guide/agent.md):
* `TokenGate` checks `Authorization: Bearer TOKEN` on every request before any route runs,
  with `hmac.compare_digest` (time independent of where the tokens differ); a bad or missing
  token gets a bare 401, nothing else, whatever the path.
* Read-only: only GET routes that report machine state; nothing here runs a command or reads
  a file a request names.
* Process command lines are sent only when `share_cmdlines` is set (they can hold secrets).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

import psutil
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from llmtop import __version__
from llmtop.engines.ollama import OllamaEngine
from llmtop.probes import wire
from llmtop.probes.catalogue import Category
from llmtop.probes.engine_identity import EngineIdentity, identify_engine
from llmtop.probes.engine_state import CouldNotCheck, engine_findings
from llmtop.probes.preflight import finding_dict
from llmtop.probes.sampler import ProbeSample, ProbeSampler

ENGINE_POLL_S = 5.0  # /api/ps and the engine's pids are re-read this often
IDENTIFY_EVERY = 6  # polls between re-identifications (net_connections costs ~10 ms)
IDLE_INTERVAL_S = 5.0  # with no stream open the agent samples this seldom (its own cost)
QUEUE_SAMPLES = 4  # a stream that falls this far behind loses its oldest samples
CMDLINE_APPS = 5  # --share-cmdlines: the busiest apps whose command lines are sent
CMDLINE_PIDS = 3  # … and at most this many of each app's processes

Scope = MutableMapping[str, Any]
Asgi = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
                Awaitable[None]]


class TokenGate:
    """ASGI middleware: every HTTP request must carry `Authorization: Bearer <token>`
    (token None: no check, for a loopback-only agent). Refusals are a bare 401."""

    def __init__(self, app: Asgi, token: str | None) -> None:
        self.app = app
        self._expected = None if token is None else b"Bearer " + token.encode()

    def allowed(self, scope: Scope) -> bool:
        """True when the request's Authorization header equals the expected one."""
        if self._expected is None:
            return True
        given = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), b"")
        return hmac.compare_digest(given, self._expected)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not self.allowed(scope):
            await Response(status_code=401, headers={"WWW-Authenticate": "Bearer"})(
                scope, receive, send)
            return
        await self.app(scope, receive, send)


class Agent:
    """The agent's state: its sampler, the engine it watches, and the open streams.

    engine_host: the engine's URL on this machine. interval_s: sampling period (s).
    engine_pids: pids named by the user (else identified). share_cmdlines: see module doc.
    clock_offset_ns: added to every stamp the agent sends (tests inject a known offset).
    """

    def __init__(self, engine_host: str, interval_s: float = 0.5, *,
                 engine_pids: tuple[int, ...] = (), share_cmdlines: bool = False,
                 clock_offset_ns: int = 0) -> None:
        self.machine = socket.gethostname()
        self.engine_host = engine_host
        self.pinned = engine_pids
        self.share_cmdlines = share_cmdlines
        self.offset_ns = clock_offset_ns
        self.identity = EngineIdentity(engine_host)
        self.engine: dict[str, Any] = {"findings": None, "reason": "not read yet"}
        self.interval_s = interval_s
        # the GPU read in every sample only while a client streams the samples (a remote
        # llmtop measuring); the sampler's slow beat while nobody listens
        self.sampler = ProbeSampler(max(interval_s, IDLE_INTERVAL_S), self._sampled,
                                    engine_pids=lambda: self.identity.pids,
                                    measuring=lambda: bool(self._streams))
        self._streams: set[asyncio.Queue[bytes]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    def now_ns(self) -> int:
        """The agent's clock (perf_counter_ns, plus the injected offset)."""
        return time.perf_counter_ns() + self.offset_ns

    def info(self) -> dict[str, Any]:
        """The PATH_INFO answer."""
        return {"machine": self.machine, "llmtop_version": __version__,
                "engine_host": self.engine_host, "engine": self.identity.to_dict(),
                "interval_s": self.interval_s, "share_cmdlines": self.share_cmdlines,
                "agent_ns": self.now_ns()}

    def envelope(self, sample: ProbeSample) -> dict[str, Any]:
        """One sample as sent (wire.envelope), with the engine's state and, when shared, the
        busiest apps' command lines."""
        cmdlines = busy_cmdlines(sample) if self.share_cmdlines else None
        return wire.envelope(sample, self.now_ns(), self.machine, self.engine, cmdlines,
                             self.offset_ns)

    def _sampled(self, sample: ProbeSample) -> None:
        """In the sampler thread: encode once, hand to the loop for the streams."""
        loop = self._loop
        if loop is not None and self._streams:
            line = wire.encode_line(self.envelope(sample))
            with contextlib.suppress(RuntimeError):  # the loop is closing
                loop.call_soon_threadsafe(self._publish, line)

    def _publish(self, line: bytes) -> None:
        for queue in self._streams:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(line)

    async def lines(self) -> AsyncIterator[bytes]:
        """One stream's lines: samples as they come, a ping after PING_S without one."""
        queue: asyncio.Queue[bytes] = asyncio.Queue(QUEUE_SAMPLES)
        self._streams.add(queue)
        self.sampler.set_interval(self.interval_s)  # wakes the sampler: a sample at once
        try:
            while True:
                try:
                    yield await asyncio.wait_for(queue.get(), wire.PING_S)
                except TimeoutError:
                    yield wire.encode_line({"type": "ping", "agent_ns": self.now_ns()})
        finally:
            self._streams.discard(queue)
            if not self._streams:
                self.sampler.set_interval(max(self.interval_s, IDLE_INTERVAL_S))

    async def watch_engine(self) -> None:
        """Forever: identify the engine's processes and read its /api/ps (ENGINE_POLL_S)."""
        client = OllamaEngine(self.engine_host, connect_timeout_s=2.0, read_timeout_s=5.0)
        try:
            for poll in itertools.count():
                if poll % IDENTIFY_EVERY == 0:
                    self.identity = await asyncio.to_thread(
                        identify_engine, self.engine_host, self.pinned)
                latest = self.sampler.latest
                gpu = latest is not None and latest.gpu is not None and bool(latest.gpu.devices)
                found = await engine_findings(client, None, gpu_present=gpu or None)
                self.engine = ({"findings": None, "reason": found.reason}
                               if isinstance(found, CouldNotCheck)
                               else {"findings": [finding_dict(f) for f in found], "reason": None})
                await asyncio.sleep(ENGINE_POLL_S)
        finally:
            await client.aclose()

    @contextlib.asynccontextmanager
    async def running(self, _app: Starlette) -> AsyncIterator[None]:
        """Lifespan: sample and watch the engine while the app serves."""
        self._loop = asyncio.get_running_loop()
        self.sampler.start()
        watcher = asyncio.create_task(self.watch_engine())
        try:
            yield
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            await asyncio.to_thread(self.sampler.stop)


def busy_cmdlines(sample: ProbeSample) -> dict[str, list[str]]:
    """app → the command lines of up to CMDLINE_PIDS of its processes, for the CMDLINE_APPS
    busiest apps other than llmtop itself (unreadable ones left out)."""
    out: dict[str, list[str]] = {}
    apps = [a for a in (sample.processes.apps if sample.processes else ())
            if a.category is not Category.SELF][:CMDLINE_APPS]
    for app in apps:
        lines = []
        for pid in app.pids[:CMDLINE_PIDS]:
            with contextlib.suppress(psutil.Error, OSError):
                lines.append(" ".join(psutil.Process(pid).cmdline()))
        out[app.app] = lines
    return out


def create_app(agent: Agent, token: str | None) -> TokenGate:
    """The agent's ASGI app behind its token check (token None: no check)."""

    async def info(_: Request) -> Response:
        return JSONResponse(agent.info())

    async def clock(_: Request) -> Response:
        return JSONResponse({"agent_ns": agent.now_ns()})

    async def sample(_: Request) -> Response:
        taken = await asyncio.to_thread(agent.sampler.sample_once)
        return Response(wire.encode_line(agent.envelope(taken)), media_type="application/json")

    async def stream(_: Request) -> Response:
        return StreamingResponse(agent.lines(), media_type=wire.NDJSON,
                                 headers={"Cache-Control": "no-cache"})

    routes = [Route(wire.PATH_INFO, info), Route(wire.PATH_CLOCK, clock),
              Route(wire.PATH_SAMPLE, sample), Route(wire.PATH_STREAM, stream)]
    return TokenGate(Starlette(routes=routes, lifespan=agent.running), token)
