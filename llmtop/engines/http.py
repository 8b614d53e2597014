"""One home for what llmtop makes of an HTTP exchange that went wrong.

Used by the three places that talk HTTP to an Ollama-API server or to the relay:
`OllamaEngine` (engines/ollama.py), `RelayEngine` (engines/relay.py) and the relay server
(servers/relay/stream.py). Each turns a status, a body or a transport exception into the same
`Failure` (kind, message, remedy), with the same wording, naming the server it talked to.

`Peer` says who that server is: its URL, what it should be ("an Ollama server", "the llmtop
relay") and how to start it, and the read timeout used, so the messages can say which
server to look at and for how long nothing came.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from time import perf_counter_ns

import httpx

from llmtop.engines import timeouts
from llmtop.engines.events import Failure, FailureKind
from llmtop.stamping.bounds import OffHostRedirect, ReplyTooLarge

# The clients' timeouts, s, kept where the CLI can read them without httpx (engines/timeouts.py)
DEFAULT_CONNECT_TIMEOUT_S = timeouts.DEFAULT_CONNECT_TIMEOUT_S
DEFAULT_READ_TIMEOUT_S = timeouts.DEFAULT_READ_TIMEOUT_S

ERROR_TEXT_CHARS = 200  # how much of a non-JSON error body a message quotes


class BadRequest(ValueError):
    """A request body that llmtop's servers refuse; `status` is the HTTP status to answer
    with (400 unless said, 404 for a model the embedded engine does not serve)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Peer:
    """The server at the other end, as failure messages name it.

    url: its base URL, e.g. "http://127.0.0.1:11434".
    kind: what it should be, with its article: "an Ollama server", "the llmtop relay".
    start: the remedy when it does not answer at all (how to start it or point at it).
    read_timeout_s: the read timeout in seconds, quoted when it ran out.
    """

    url: str
    kind: str
    start: str
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S


# A client's hook for a failed request: given the failure and the stream's progress words
# (StreamProgress.words), the failure to report instead (servers/child.autopsy names a child
# server of llmtop's that died).
Autopsy = Callable[[Failure, str], Awaitable[Failure]]


class StreamProgress:
    """How far one streamed reply had come, for the message when it breaks.

    Stamps (perf_counter_ns): `t_sent` at creation (just before the request is sent),
    `t_first` at the first chunk; `chunks` counts them. `saw(t_ns)` once per chunk."""

    __slots__ = ("chunks", "t_first", "t_sent")

    def __init__(self) -> None:
        self.t_sent = perf_counter_ns()
        self.t_first: int | None = None
        self.chunks = 0

    def saw(self, t_ns: int) -> None:
        """One more chunk, arrived at t_ns."""
        if self.t_first is None:
            self.t_first = t_ns
        self.chunks += 1

    def words(self, now_ns: int | None = None) -> str:
        """"after 3.21 s of streaming (41 chunks)", or "before the first chunk, 1.20 s after
        the request was sent"."""
        now = perf_counter_ns() if now_ns is None else now_ns
        if self.t_first is None:
            waited = (now - self.t_sent) / 1e9
            return f"before the first chunk, {waited:.2f} s after the request was sent"
        plural = "" if self.chunks == 1 else "s"
        streamed = (now - self.t_first) / 1e9
        return f"after {streamed:.2f} s of streaming ({self.chunks} chunk{plural})"


MAX_ERROR_NESTING = 4  # how many error bodies inside error strings are opened


def server_error(body: bytes | str) -> str | None:
    """The `error` string of an Ollama-shaped error body `{"error": "..."}`, else None; the
    error bodies inside that string are opened (`opened`)."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return None
    return opened(error) if isinstance(error, str) else None


def opened(error: str) -> str:
    """The innermost message of an error text whose message is another error body, JSON in the
    string, up to MAX_ERROR_NESTING deep (`inner_error`). Ollama passes its runner's error
    body on inside its own: a prompt too long for the context arrives as an `error` whose
    text is the JSON body {"error": "the input length exceeds the context length"}."""
    for _ in range(MAX_ERROR_NESTING):
        inner = inner_error(error)
        if inner is None:
            break
        error = inner
    return error


def inner_error(text: str) -> str | None:
    """The message of an error body in `text`, or None when there is none: `text` that is an
    Ollama body {"error": "..."} or OpenAI's {"error": {"message": "..."}}, or that ends
    with one after a prefix ("runner: " and a body give "runner: " and its message)."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        found = json.loads(text[start:])
    except ValueError:
        return None
    error = found.get("error") if isinstance(found, dict) else None
    if isinstance(error, dict):
        error = error.get("message")
    if not isinstance(error, str):
        return None
    prefix = text[:start].strip().rstrip(":").strip()
    return f"{prefix}: {error}" if prefix else error


def error_text(status: int, body: bytes | str) -> str:
    """What to quote of an error reply: the server's `error` string, else the first 200
    characters of the body, else the status's reason phrase (e.g. "Not Found")."""
    error = server_error(body)
    if error is not None:
        return error
    raw = body if isinstance(body, str) else body.decode(errors="replace")
    shown = opened(raw)[:ERROR_TEXT_CHARS].strip()
    return shown or httpx.codes.get_reason_phrase(status) or "no reason given"


def failure_for_http(
    status: int,
    body: bytes | str,
    *,
    peer: Peer,
    model: str = "",
    installed: Sequence[str] = (),
) -> Failure:
    """The Failure for a non-200 answer. status: HTTP status; body: the raw reply body (or
    the error text a client library already took out of it); model: the model asked for;
    installed: the server's model names, listed when the model is missing.

    * 404 whose text names the model → MODEL_NOT_FOUND. Ollama answers a missing model with
      404 `{"error": "model 'x' not found"}` (docs/protocols.md, "Errors"), which names it.
    * any other 404 → PROTOCOL: the route is missing, so the server is not `peer.kind`.
    * 429, 503, or a text saying the server is busy (Ollama: "server busy … maximum pending
      requests exceeded"; llama.cpp: "no slot available") → BUSY: the engine's queue is
      full, never a latency sample.
    * a text saying the prompt does not fit the context (`is_context_text`) → BAD_REQUEST
      with CONTEXT_REMEDY, whatever the status (Ollama answers it 400 or 500).
    * other 4xx → BAD_REQUEST; 5xx and anything else → SERVER_ERROR.
    """
    text = error_text(status, body)
    if status in (429, 503) or is_busy_text(text):
        return failure_busy(f"HTTP {status}: {text}", peer=peer)
    if is_context_text(text):
        return Failure(FailureKind.BAD_REQUEST,
                       f"{peer.url} rejected the request (HTTP {status}): {text}", CONTEXT_REMEDY)
    if status == 404 and model and model in text:
        listing = ", ".join(installed) if installed else "none"
        return Failure(
            FailureKind.MODEL_NOT_FOUND,
            f"model '{model}' not found at {peer.url} (installed: {listing})",
            f"pull it with `ollama pull {model}` or pick an installed one with --model",
        )
    if status == 404:
        return failure_protocol(f"HTTP 404: {text}", peer=peer)
    if 400 <= status < 500:
        return Failure(
            FailureKind.BAD_REQUEST,
            f"{peer.url} rejected the request (HTTP {status}): {text}",
            "check the model name and options",
        )
    return Failure(
        FailureKind.SERVER_ERROR,
        f"{peer.url} failed (HTTP {status}): {text}",
        "check the server's log and retry",
    )


BUSY_WORDS = ("server busy", "no slot available", "no slots available", "too many requests",
              "maximum pending requests", "server overloaded")
BUSY_REMEDY = ("the engine's queue is full: send fewer requests at once, or raise its limits "
               "(Ollama: OLLAMA_NUM_PARALLEL and OLLAMA_MAX_QUEUE; llama-server: --parallel)")


# What servers say when the prompt does not fit the context: Ollama's runner ("the input
# length exceeds the context length"), llama-server ("request (6027 tokens) exceeds the
# available context size (512 tokens), try increasing it", type exceed_context_size_error),
# the OpenAI API and vLLM ("maximum context length is …", code context_length_exceeded).
CONTEXT_WORDS = ("exceeds the context length", "exceeds context length",
                 "exceeds the available context size", "exceed_context_size",
                 "context_length_exceeded", "maximum context length")
CONTEXT_REMEDY = ("the prompt does not fit the model's context: give it a larger context "
                  "(llmtop's --num-ctx is Ollama's num_ctx; OLLAMA_CONTEXT_LENGTH sets an Ollama "
                  "server's default; llama-server: --ctx-size) or send a shorter prompt")


def is_context_text(text: str) -> bool:
    """True when an error text says the prompt does not fit the model's context."""
    lowered = text.lower()
    return any(word in lowered for word in CONTEXT_WORDS)


def is_busy_text(text: str) -> bool:
    """True when an error text says the server is too busy to take the request."""
    lowered = text.lower()
    return any(word in lowered for word in BUSY_WORDS)


def failure_busy(detail: str, *, peer: Peer) -> Failure:
    """The Failure for an engine that refused a request because it is busy (BUSY)."""
    return Failure(FailureKind.BUSY, f"{peer.url} is busy and refused the request ({detail})",
                   BUSY_REMEDY)


def failure_in_stream(error: str, *, peer: Peer) -> Failure:
    """The Failure for an `{"error": ...}` line after streaming began (Ollama's way of
    reporting a failure once the 200 status is sent); BUSY when the text says so, BAD_REQUEST
    with CONTEXT_REMEDY for a prompt too long for the context. An error body inside the text
    is opened (`opened`)."""
    error = opened(error)
    if is_busy_text(error):
        return failure_busy(error, peer=peer)
    if is_context_text(error):
        return Failure(FailureKind.BAD_REQUEST, f"{peer.url} reported an error mid-stream: "
                       f"{error}", CONTEXT_REMEDY)
    return Failure(
        FailureKind.SERVER_ERROR,
        f"{peer.url} reported an error mid-stream: {error}",
        "the text received so far is kept; check the server's log",
    )


def failure_truncated(peer: Peer, progress: StreamProgress | None = None) -> Failure:
    """The Failure for a stream that ended cleanly but without its done chunk; progress: how
    far it had come (named in the message)."""
    when = f" {progress.words()}" if progress is not None else ""
    return Failure(
        FailureKind.TRUNCATED,
        f"the stream from {peer.url} ended without a done chunk{when} (response truncated)",
        "the server may have crashed or dropped the connection; check its log and retry",
    )


def failure_unreachable(detail: str, *, peer: Peer) -> Failure:
    """The Failure for a server that does not answer at all; detail: the connect error."""
    return Failure(
        FailureKind.UNREACHABLE,
        f"cannot reach {peer.kind} at {peer.url} ({detail})",
        peer.start,
    )


def failure_for_transport(exc: BaseException, *, peer: Peer,
                          progress: StreamProgress | None = None) -> Failure:
    """The Failure for an exception raised while talking to `peer` (progress: how far a
    streamed reply had come, named when it broke mid-stream):

    * a redirect to another server (stamping/bounds.py) → PROTOCOL
    * a reply past a bound (stamping/bounds.py: a line, a decompressed size) → LIMIT
    * connect error or connect timeout (and OSError, e.g. refused) → UNREACHABLE
    * read timeout (no byte for `peer.read_timeout_s`) → TIMEOUT
    * connection dropped mid-reply → TRUNCATED
    * anything else → SERVER_ERROR, naming the exception.
    """
    if isinstance(exc, OffHostRedirect):
        return Failure(
            FailureKind.PROTOCOL,
            f"{peer.url} answered with {exc}: llmtop does not follow a redirect to another "
            "server (it would measure that one)",
            "point --host at the server that answers, not at one that redirects",
        )
    if isinstance(exc, ReplyTooLarge):
        return Failure(
            FailureKind.LIMIT,
            f"{peer.url} sent {exc}: llmtop stopped reading it"
            + (f" {progress.words()}" if progress is not None else ""),
            "the server is not behaving as an LLM server; check what answers at that address",
        )
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | OSError):
        return failure_unreachable(str(exc) or type(exc).__name__, peer=peer)
    if isinstance(exc, httpx.TimeoutException):
        return Failure(
            FailureKind.TIMEOUT,
            f"no data from {peer.url} for {peer.read_timeout_s:g} s",
            "the server is stuck or overloaded; check it, or raise the read timeout",
        )
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        when = f" {progress.words()}" if progress is not None else ""
        return Failure(
            FailureKind.TRUNCATED,
            f"the connection to {peer.url} broke mid-stream{when} ({type(exc).__name__}: {exc})",
            "the server may have crashed; check its log and retry",
        )
    return Failure(
        FailureKind.SERVER_ERROR,
        f"request to {peer.url} failed: {type(exc).__name__}: {exc}",
        "check the server and retry",
    )


def failure_past_predict(chunks: int, num_predict: object) -> Failure:
    """The failure of a stream that sent `chunks` text chunks without ending, past what its
    `num_predict` asked for (stamping/bounds.py, `chunk_limit`): reading stopped there."""
    return Failure(FailureKind.PROTOCOL,
                   f"the server sent {chunks} chunks without ending the stream, though "
                   f"num_predict asked for {num_predict} tokens: stopped reading",
                   "the server ignores num_predict or never sends its done chunk; check it")


def failure_protocol(detail: str, *, peer: Peer) -> Failure:
    """The Failure for a reply that is not the protocol `peer.kind` speaks."""
    return Failure(
        FailureKind.PROTOCOL,
        f"{peer.url} did not answer as {peer.kind} ({detail})",
        f"check that {peer.url} is {peer.kind}",
    )
