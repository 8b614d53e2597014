"""The embedded engine: llama.cpp behind Ollama's native HTTP API (Starlette + uvicorn).

`llmtop engine` serves this app; `llmtop` starts it as a child process when no Ollama answers.
As Ollama (docs/protocols.md, "Ollama native API"): NDJSON, `{"error": ...}` bodies, omitted zero
statistics, headers sent with the first chunk (so an error before any text is a real HTTP
status), a final `{"error": ...}` line for a failure after streaming began.

Timing semantics (all ns, measured with perf_counter_ns on the server):
* total_duration: handler entry → the done line.
* load_duration: request parsing + loading the model when it was not loaded, and the checks
  before the slot (rendering, tokenizing) when the request had to wait for the vocabulary's
  load (a request sent as the engine starts: 0.6 s that `run` showed as server overhead).
  Waiting for the single generation slot is not in it (as with Ollama's parallel-slot wait):
  it shows only in total_duration.
* prompt_eval_* / eval_*: llama.cpp's perf counters (see llama_backend.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from time import perf_counter_ns
from typing import Any

import psutil
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from llmtop import __version__
from llmtop.servers.embedded.llama_backend import (
    GenerationError,
    GenerationResult,
    LlamaBackend,
    LoadSettings,
    OutOfMemory,
    context_memory,
    default_threads,
)
from llmtop.servers.embedded.llama_config import Choice
from llmtop.servers.embedded.model_files import ModelDescription
from llmtop.servers.embedded.requests import BadRequest, ParsedRequest, parse_body, parse_request
from llmtop.servers.guard import Guard, LocalOnly, read_body, wrong_type

try:  # Starlette imports anyio's asyncio backend (~90 ms) on the first streamed response;
    # import it now so the first request's TTFT does not pay for it.
    import anyio._backends._asyncio  # noqa: F401
except ImportError:  # pragma: no cover - a future anyio may move it
    pass

NDJSON = "application/x-ndjson"
DISCONNECT_POLL_S = 0.25  # how often a non-streaming request checks that its client is still there
CLOSE_WAIT_S = 0.3  # at shutdown, how long the running generation gets to stop (a token
# takes ~15 ms on 2 cores for the bundled model: the rest is room for a loaded machine)
QUEUED_AND_GONE = "the client disconnected while the request waited for the model; not run"
_END = object()
Prompt = tuple[list[int], tuple[str, ...]]  # token ids, stop strings


def _failed(exc: Exception) -> dict[str, Any]:
    """The error chunk for a request refused or failed before its stream began."""
    if isinstance(exc, BadRequest):
        return {"error": str(exc), "_status": exc.status}
    return {"error": str(exc), "_status": 400 if isinstance(exc, OutOfMemory) else 500}


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def _quietly(fn: Callable[[], Any]) -> None:
    """Run fn, ignoring its failure (a warm-up whose error the first request reports)."""
    with contextlib.suppress(Exception):
        fn()


@dataclass(frozen=True, slots=True)
class JobRecord:
    """What the engine did for one request (kept for tests and diagnostics)."""

    endpoint: str
    done_reason: str
    eval_count: int
    cancelled: bool
    error: str | None


def _now_label() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class EmbeddedEngine:
    """One model served on Ollama's API, one generation at a time.

    description: the model's metadata (model_files.describe). default_num_ctx: tokens, used
    when a request gives no num_ctx. llama_config: the llama.cpp configuration chosen for this
    machine (servers/embedded/llama_config.py, already applied), reported by `/api/version`;
    None when the caller applied none. Requests queue on an asyncio lock and never interleave on the
    shared llama.cpp context.
    """

    def __init__(
        self,
        description: ModelDescription,
        *,
        chat_format: str = "gemma",
        default_num_ctx: int = 4096,
        llama_config: Choice | None = None,
    ) -> None:
        self.description = description
        self.llama_config = llama_config
        self.default_num_ctx = default_num_ctx
        self.backend = LlamaBackend(description.path, chat_format=chat_format)
        self.history: deque[JobRecord] = deque(maxlen=200)
        self._lock = asyncio.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama")
        # Rendering and tokenizing prompts, before the slot (the vocabulary loads there now,
        # so the first request does not wait for it).
        self._prep = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama-prep")
        self._prep.submit(_quietly, self.backend.n_vocab)
        self._running: dict[Future[GenerationResult], threading.Event] = {}
        self.waiting = 0  # requests waiting for the generation slot
        self._expires_at: datetime | None = None
        self._unload_timer: asyncio.TimerHandle | None = None

    @property
    def name(self) -> str:
        """The model tag served (e.g. "gemma3:270m")."""
        return self.description.name

    # ------------------------------------------------------------------ model lifetime

    def _settings(self, job: ParsedRequest) -> LoadSettings:
        num_ctx = job.num_ctx or self.default_num_ctx
        if self.description.context_length:
            num_ctx = min(num_ctx, self.description.context_length)
        return LoadSettings(self.description.path, num_ctx=num_ctx, num_thread=job.num_thread)

    async def _load(self, job: ParsedRequest) -> int:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, self.backend.ensure_loaded, self._settings(job)
        )

    def _schedule_unload(self, keep_alive_s: float) -> None:
        if self._unload_timer is not None:
            self._unload_timer.cancel()
            self._unload_timer = None
        if keep_alive_s < 0:
            self._expires_at = datetime.now(UTC) + timedelta(days=365 * 100)
            return
        self._expires_at = datetime.now(UTC) + timedelta(seconds=keep_alive_s)
        loop = asyncio.get_running_loop()
        self._unload_timer = loop.call_later(
            keep_alive_s, lambda: asyncio.ensure_future(self._expire())
        )

    async def _expire(self) -> None:
        async with self._lock:
            if self._expires_at is not None and datetime.now(UTC) >= self._expires_at:
                await asyncio.get_running_loop().run_in_executor(
                    self._executor, self.backend.unload
                )
                self._expires_at = None

    def close(self, wait_s: float = CLOSE_WAIT_S) -> bool:
        """Server shutdown: stop the running generation (its cancel flag: within one token),
        drop queued work, and free the model once the worker thread is idle. Waits at most
        `wait_s` seconds; returns False when the thread is still busy then (a long prompt
        evaluation inside llama.cpp cannot be interrupted), so the caller can exit hard.
        Idempotent."""
        for cancel in list(self._running.values()):
            cancel.set()
        running = list(self._running)
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._prep.shutdown(wait=False, cancel_futures=True)
        if futures_wait(running, timeout=wait_s).not_done:
            return False
        self.backend.close()
        return True

    # ------------------------------------------------------------------ one request

    async def run(self, job: ParsedRequest, endpoint: str, t_start: int,
                  gone: Callable[[], Awaitable[bool]] | None = None,
                  ) -> AsyncGenerator[dict[str, Any], None]:
        """Yield Ollama chunk objects for one request; the last one has `done: true` or `error`
        (with `_status`, the HTTP status to answer when nothing was sent yet).

        Before the generation slot: the prompt is rendered and tokenized, and refused (400)
        when it is longer than the context or the context cannot fit in memory. In the slot:
        a request whose client left while it waited (`gone()` true) is dropped unstarted and
        recorded as cancelled. The slot's lock is released only when the worker thread is
        finished, even if the consumer goes away (which sets the cancel flag, checked per token).
        """
        t_parsed = perf_counter_ns()
        loading_vocab = not self.backend.vocab_loaded  # the prep thread is still loading it
        try:
            prompt = await self._prepare(job)
        except (BadRequest, GenerationError) as exc:
            yield _failed(exc)
            return
        # the vocabulary's load is the model's: in load_duration (module docstring)
        vocab_ns = perf_counter_ns() - t_parsed if loading_vocab else 0
        self.waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self.waiting -= 1
        released = False
        try:
            if gone is not None and await gone():
                self.history.append(JobRecord(endpoint, "cancelled", 0, True, QUEUED_AND_GONE))
                yield {"error": QUEUED_AND_GONE, "_status": 499}
                return
            try:
                load_ns = await self._load(job)
            except GenerationError as exc:
                yield _failed(exc)
                return
            if prompt is None:
                yield await self._load_only(job, endpoint)
                return
            released = True  # the worker thread owns the lock now (released by _finished)
            chunks = self._stream(job, prompt, endpoint, t_start,
                                  (t_parsed - t_start) + vocab_ns + load_ns)
            try:
                async for item in chunks:
                    yield item
            finally:
                await chunks.aclose()
        finally:
            if not released:
                self._lock.release()

    async def _prepare(self, job: ParsedRequest) -> Prompt | None:
        """The checks made before a request takes the slot, on the prep thread: the context
        must fit in memory, the prompt (rendered, tokenized) in the context. Returns the
        prompt's tokens and stop strings, or None for a load-only request. Raises BadRequest."""
        loop = asyncio.get_running_loop()
        settings = self._settings(job)
        await loop.run_in_executor(self._prep, self._check_memory, settings)
        if job.load_only:
            return None
        prompt = await loop.run_in_executor(self._prep, self._render, job)
        if len(prompt[0]) > settings.num_ctx:
            raise BadRequest(
                f"the prompt is {len(prompt[0])} tokens, longer than the context (num_ctx "
                f"{settings.num_ctx}): shorten it or raise num_ctx")
        return prompt

    def _check_memory(self, settings: LoadSettings) -> None:
        """BadRequest naming num_ctx when its KV cache and logits buffer cannot fit:
        the KV cache (and the model, when not loaded) must fit in the available memory, the
        logits buffer in RAM + swap (Linux's heuristic overcommit refuses one allocation
        larger than that). Sizes: llama_backend.context_memory."""
        if settings == self.backend.loaded:
            return
        kv, logits = context_memory(settings.num_ctx, self.description.model_info,
                                    self.backend.n_vocab())
        memory = psutil.virtual_memory()
        room = memory.available - (0 if self.backend.loaded else self.description.size)
        ceiling = memory.total + psutil.swap_memory().total
        if kv <= room and logits <= ceiling:
            return
        per_token = (kv + logits) / settings.num_ctx
        largest = int(
            min(room / max(kv / settings.num_ctx, 1), ceiling / max(logits / settings.num_ctx, 1))
        )
        raise BadRequest(
            f"option 'num_ctx' {settings.num_ctx} needs about {_gib(kv + logits)} of memory "
            f"(KV cache {_gib(kv)}, logits buffer {_gib(logits)}; {per_token / 1024:.0f} KiB "
            f"per token), more than this machine can give ({_gib(memory.available)} available, "
            f"{_gib(ceiling)} RAM + swap): use a num_ctx of at most about {max(largest, 0)}")

    def _render(self, job: ParsedRequest) -> Prompt:
        """The prompt text as the model sees it (chat template applied), tokenized, and the
        template's stop strings."""
        if job.messages is not None:
            text, stops = self.backend.chat_prompt(job.messages)
        elif job.raw:
            text, stops = job.prompt, ()
        else:
            turns = ([{"role": "system", "content": job.system}] if job.system else []) + [
                {"role": "user", "content": job.prompt}
            ]
            text, stops = self.backend.chat_prompt(turns)
        return self.backend.tokenize(text), tuple(stops)

    async def _stream(self, job: ParsedRequest, prompt: Prompt, endpoint: str, t_start: int,
                      load_duration: int) -> AsyncGenerator[dict[str, Any], None]:
        """The generation on the worker thread, as chunks; holds the slot's lock until the
        thread is done (`_finished`), and sets the cancel flag when closed early."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        cancel = threading.Event()

        def emit(text: str) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, text)

        def work() -> GenerationResult:
            try:
                return self._generate(job, prompt, emit, cancel)
            finally:
                with contextlib.suppress(RuntimeError):  # the loop closed: server shutdown
                    loop.call_soon_threadsafe(queue.put_nowait, _END)

        job_future = self._executor.submit(work)
        self._running[job_future] = cancel
        future = asyncio.wrap_future(job_future)
        # Record what the thread did even if the consumer has gone away.
        future.add_done_callback(lambda f: self._finished(f, endpoint, job_future))
        try:
            while (item := await queue.get()) is not _END:
                yield self._chunk(job, item)
            try:
                result = await future
            except GenerationError as exc:
                yield {"error": str(exc), "_status": 500}
                return
            except Exception as exc:  # noqa: BLE001 - a crash in llama.cpp mid-stream
                yield {
                    "error": f"an error was encountered while running the model: {exc}",
                    "_status": 500,
                }
                return
            if job.keep_alive_s == 0:
                loop.run_in_executor(self._executor, self.backend.unload)
            else:
                self._schedule_unload(job.keep_alive_s)
            yield self._final(job, result, t_start, load_duration)
        finally:
            cancel.set()  # the consumer left (disconnect) or finished: stop within one token

    async def _load_only(self, job: ParsedRequest, endpoint: str) -> dict[str, Any]:
        """The answer to a request with nothing to generate, the model now loaded: Ollama's
        done chunk with done_reason "load", or "unload" for keep_alive 0 (then unloaded)."""
        done_reason = "unload" if job.keep_alive_s == 0 else "load"
        if job.keep_alive_s == 0:
            await asyncio.get_running_loop().run_in_executor(self._executor, self.backend.unload)
        else:
            self._schedule_unload(job.keep_alive_s)
        self.history.append(JobRecord(endpoint, done_reason, 0, False, None))
        return self._chunk(job, "", done=True) | {"done_reason": done_reason}

    def _finished(self, future: asyncio.Future[GenerationResult], endpoint: str,
                  job_future: Future[GenerationResult]) -> None:
        self._running.pop(job_future, None)
        self._lock.release()
        exc = None if future.cancelled() else future.exception()
        if exc is not None or future.cancelled():
            self.history.append(JobRecord(endpoint, "error", 0, False, str(exc)))
        else:
            r = future.result()
            self.history.append(JobRecord(endpoint, r.done_reason, r.eval_count, r.cancelled, None))

    def _generate(self, job: ParsedRequest, prompt: Prompt, emit: Any, cancel: threading.Event
                  ) -> GenerationResult:
        tokens, stops = prompt
        sampling = replace(job.sampling, stop=tuple(job.sampling.stop) + stops)
        return self.backend.generate(tokens, sampling, emit, cancel)

    def _chunk(self, job: ParsedRequest, text: str, *, done: bool = False) -> dict[str, Any]:
        base: dict[str, Any] = {"model": self.name, "created_at": _now_label()}
        if job.messages is not None:
            base["message"] = {"role": "assistant", "content": text}
        else:
            base["response"] = text
        base["done"] = done
        return base

    def _final(
        self, job: ParsedRequest, result: GenerationResult, t_start: int, load_ns: int
    ) -> dict[str, Any]:
        final = self._chunk(job, "", done=True)
        final["done_reason"] = result.done_reason
        if job.messages is None and not job.raw:
            final["context"] = result.tokens
        stats = {
            "load_duration": load_ns,
            "prompt_eval_count": result.prompt_eval_count,
            "prompt_eval_duration": result.prompt_eval_duration,
            "eval_count": result.eval_count,
            "eval_duration": result.eval_duration,
        }
        # Ollama's Metrics fields are omitempty: a zero is absent, never sent as 0.
        final.update({k: v for k, v in stats.items() if v})
        final["total_duration"] = perf_counter_ns() - t_start
        return final

    # ------------------------------------------------------------------ listings

    def tag(self) -> dict[str, Any]:
        """This model as an `/api/tags` entry."""
        d = self.description
        return {
            "name": d.name,
            "model": d.name,
            "modified_at": d.modified_at,
            "size": d.size,
            "digest": d.digest,
            "details": d.details(),
        }

    def running(self) -> list[dict[str, Any]]:
        """`/api/ps` entries: the model when it is loaded (CPU only, so size_vram is 0)."""
        settings = self.backend.loaded
        if settings is None:
            return []
        expires = self._expires_at or datetime.now(UTC)
        return [
            self.tag()
            | {
                "size_vram": 0,
                "expires_at": expires.isoformat().replace("+00:00", "Z"),
                "context_length": settings.num_ctx,
            }
        ]


# ---------------------------------------------------------------------- HTTP layer


def _error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


# Each route reads the engine from `request.app.state.engine` (set by create_app).


async def root(_: Request) -> Response:
    """`GET /`: Ollama's liveness answer, marked as llmtop's embedded engine."""
    return PlainTextResponse("Ollama is running", headers={"X-Llmtop-Engine": "embedded"})


async def version(request: Request) -> Response:
    """`GET /api/version`: llmtop's version, llama-cpp-python's, and `llama_config`: the
    llama.cpp configuration this engine loads with and why (llama_config.Choice.to_dict),
    null when none was chosen."""
    import llama_cpp

    choice = request.app.state.engine.llama_config
    return JSONResponse({
        "version": __version__,
        "engine": "llmtop-embedded",
        "llama_cpp_python": llama_cpp.__version__,
        "llama_config": ({**choice.to_dict(), **_threads()} if choice is not None else None),
    })


def _threads() -> dict[str, Any]:
    """The threads a request without num_thread runs with, and why (`default_threads`)."""
    chosen = default_threads()
    return {"threads": chosen.threads, "threads_why": chosen.why}


async def jobs(request: Request) -> Response:
    """`GET /llmtop/jobs`: llmtop's own diagnostic route, what the engine did for the 50 most
    recent requests (newest last), and how many wait for the generation slot now."""
    engine: EmbeddedEngine = request.app.state.engine
    return JSONResponse({"jobs": [asdict(j) for j in list(engine.history)[-50:]],
                         "waiting": engine.waiting})


async def tags(request: Request) -> Response:
    """`GET /api/tags`: the one model served."""
    return JSONResponse({"models": [request.app.state.engine.tag()]})


async def ps(request: Request) -> Response:
    """`GET /api/ps`: the model when it is loaded."""
    return JSONResponse({"models": request.app.state.engine.running()})


async def show(request: Request) -> Response:
    """`POST /api/show`: the model's details; 404 for another model."""
    engine: EmbeddedEngine = request.app.state.engine
    try:
        body = parse_body(await read_body(request, request.app.state.guard.max_body_bytes))
    except BadRequest as exc:
        return _error(str(exc), exc.status)
    model = body.get("model") or body.get("name")
    if not model:
        return _error("model is required", 400)
    if not isinstance(model, str):
        return _error(str(wrong_type("model", "a string", model)), 400)
    if model not in (engine.name, engine.name.removesuffix(":latest")):
        return _error(f"model '{model}' not found", 404)
    d = engine.description
    return JSONResponse(
        {
            "license": str(d.model_info.get("general.license", "")),
            "modelfile": f"# served by llmtop's embedded engine\nFROM {d.path}\n",
            "parameters": "",
            "template": "{{ .Prompt }}",
            "details": d.details(),
            "model_info": d.model_info,
            "capabilities": ["completion"],
            "modified_at": d.modified_at,
        }
    )


async def generate_or_chat(request: Request) -> Response:
    """`POST /api/chat` and `POST /api/generate`: validate, then stream NDJSON (or fold the
    stream into one reply for `"stream": false`)."""
    t_start = perf_counter_ns()
    engine: EmbeddedEngine = request.app.state.engine
    endpoint = request.url.path
    chat = endpoint == "/api/chat"
    try:
        raw = await read_body(request, request.app.state.guard.max_body_bytes)
        job = parse_request(parse_body(raw), chat=chat, model_name=engine.name)
    except BadRequest as exc:
        return _error(str(exc), exc.status)
    chunks = engine.run(job, endpoint, t_start, gone=request.is_disconnected)
    # Like Ollama, send headers with the first chunk: an error before any text is a status.
    first = await anext(chunks)
    if "error" in first:
        return _error(first["error"], first.get("_status", 500))
    if not job.stream:
        return await _reply_whole(request, first, chunks, chat)
    return StreamingResponse(_ndjson(first, chunks), media_type=NDJSON)


async def _reply_whole(request: Request, first: dict[str, Any],
                       chunks: AsyncGenerator[dict[str, Any], None], chat: bool) -> Response:
    """The non-streaming reply. No stream to fail on: watch for the client leaving, so nobody's
    answer is generated for no one (closing `chunks` sets the generation's cancel flag)."""
    collecting = asyncio.ensure_future(_collect(first, chunks, chat))
    while not collecting.done():
        await asyncio.wait({collecting}, timeout=DISCONNECT_POLL_S)
        if not collecting.done() and await request.is_disconnected():
            collecting.cancel()
            await chunks.aclose()
            return Response(status_code=499)
    reply = collecting.result()
    return JSONResponse(reply, status_code=500 if "error" in reply else 200)


async def _ndjson(first: dict[str, Any], chunks: AsyncGenerator[dict[str, Any], None]
                  ) -> AsyncIterator[bytes]:
    """The stream's body: one JSON line per chunk, starting with the one already read."""
    try:
        item: dict[str, Any] | None = first
        while item is not None:
            item.pop("_status", None)
            yield (json.dumps(item, ensure_ascii=False) + "\n").encode()
            item = await anext(chunks, None)
    finally:
        await chunks.aclose()


ROUTES = [
    Route("/", root, methods=["GET", "HEAD"]),
    Route("/api/version", version, methods=["GET", "HEAD"]),
    Route("/api/tags", tags, methods=["GET"]),
    Route("/api/ps", ps, methods=["GET"]),
    Route("/api/show", show, methods=["POST"]),
    Route("/api/chat", generate_or_chat, methods=["POST"]),
    Route("/api/generate", generate_or_chat, methods=["POST"]),
    Route("/llmtop/jobs", jobs, methods=["GET"]),
]


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    """Stop the generation and free the model when the server stops (`EmbeddedEngine.close`)."""
    try:
        yield
    finally:
        app.state.engine.close()


def create_app(engine: EmbeddedEngine, guard: Guard | None = None) -> Starlette:
    """The Starlette app serving `engine` on Ollama's routes, behind `guard`'s Host, Origin
    and size rules (default: a loopback server's, `Guard()`)."""
    guard = guard or Guard()
    app = Starlette(routes=ROUTES, lifespan=lifespan,
                    middleware=[Middleware(LocalOnly, guard=guard)])
    app.state.engine = engine
    app.state.guard = guard
    return app


async def _collect(
    first: dict[str, Any], chunks: AsyncIterator[dict[str, Any]], chat: bool
) -> dict[str, Any]:
    """Fold a stream into Ollama's non-streaming reply (full text on the done object)."""
    texts: list[str] = []
    item: dict[str, Any] | None = first
    final: dict[str, Any] = {}
    while item is not None:
        if "error" in item:
            return {"error": item["error"]}
        if item.get("done"):
            final = item
        else:
            texts.append(item["message"]["content"] if chat else item["response"])
        item = await anext(chunks, None)
    if chat:
        final["message"] = {"role": "assistant", "content": "".join(texts)}
    else:
        final["response"] = "".join(texts)
    return final
