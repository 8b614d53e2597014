"""What a passing response means, block by block (pure, no I/O): `llmtop watch`'s reading of
the bytes it forwards.

The proxy (servers/watch/proxy.py) hands every block of the upstream's body to a `Meter`
*after* it has written that block back to the client, with the `perf_counter_ns()` at which
the block arrived. The meter splits and parses it the way llmtop's own clients do and keeps
`StreamEvent`s (engines/events.py), so the metrics are computed by the same pure function as
for llmtop's own requests (`sessions/measure/timeline.compute_metrics`):

* Ollama (`/api/chat`, `/api/generate`): NDJSON lines, text under `message.content` /
  `message.thinking` (chat) or `response` / `thinking` (generate); the `done` line's figures
  through `ServerStats.from_mapping`; an `{"error": ...}` line ends the stream as a failure.
  `"stream": false` answers one JSON object, read the same way (TTFT = E2E then).
* OpenAI-compatible (`/v1/chat/completions`, `/v1/completions`, and the same without `/v1`
  as llama-server also serves them): SSE, split by httpx-sse's own line and event decoders
  (the parser `OpenAIEngine` uses through httpx-sse's EventSource), each event read by
  `engines/openai_stream.ChunkReader`; `/completions` chunks carry their text under
  `choices[0].text`. `[DONE]` (or the body's end after a finish_reason) is the done event,
  with ChunkReader's figures mapped onto Ollama's names. A non-streamed answer is one JSON
  object (`choices[0].message`).

A whole body's event is stamped at its last block's arrival (the body's end is noticed
after that block was handed on, which is the proxy's time, not the engine's).

A response with another status than 200 is forwarded untouched and recorded as the failure
its body names. A compressed one (`Content-Encoding: gzip` or `deflate`) is forwarded
untouched and measured from its decoded pieces (stamping/bounds.py decodes it, as for
llmtop's own clients); one in an encoding the watch cannot decode (br, zstd) is recorded as
failed with that reason, not as truncated.

Bounds (a meter runs on the loop that forwards every app's bytes, for days): a line past
MAX_LINE_BYTES, a decoded body past MAX_DECODED_BYTES, more than MAX_EVENTS chunks or
MAX_TEXT_CHARS characters of text end the measurement there with a LIMIT failure that says
so; the answer itself still passes whole. Buffers grow in place (a bytearray), never by
copying what they hold, so a long line costs its length once, not its square.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from httpx_sse._decoders import SSEDecoder, SSELineDecoder  # httpx-sse's own SSE parser

from llmtop.engines.events import Failure, FailureKind, ServerStats, StreamEvent, tool_call_text
from llmtop.engines.http import (
    Peer,
    failure_for_http,
    failure_in_stream,
    failure_protocol,
    failure_truncated,
)
from llmtop.engines.openai_stream import THINKING_KEYS, ChunkReader, StreamError, error_body_text
from llmtop.stamping.bounds import MAX_DECODED_BYTES, MAX_LINE_BYTES, ReplyBounds, ReplyTooLarge

OLLAMA_PATHS = {"/api/chat": "chat", "/api/generate": "generate"}
OPENAI_PATHS = {"/v1/chat/completions": "chat", "/v1/completions": "completions",
                "/chat/completions": "chat", "/completions": "completions"}
MAX_ERROR_BYTES = 64 * 1024  # an error body is kept up to this size, to name the failure
# An answer's events kept for its metrics: 65,536 chunks is twice the longest answer a local
# model is asked for (32k tokens of reasoning); past it an endless answer would hold the
# watch's memory (a StreamEvent is ~200 bytes) and make a log record no reader takes.
MAX_EVENTS = 1 << 16
# Text kept with those events: 1 Mi characters (~250k tokens) keeps a record with its text
# (--log-bodies) well under the log's 16 MiB line bound even with every character escaped.
MAX_TEXT_CHARS = 1 << 20


def endpoint_of(method: str, path: str) -> tuple[str, str] | None:
    """(api, shape) for a generation request llmtop measures — ("ollama", "chat"),
    ("openai", "completions"), ... — or None for anything else (passed through unmeasured)."""
    if method != "POST":
        return None
    if path in OLLAMA_PATHS:
        return "ollama", OLLAMA_PATHS[path]
    if path in OPENAI_PATHS:
        return "openai", OPENAI_PATHS[path]
    return None


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What the request body says: the model, whether it streams (each API's default when
    absent: Ollama streams, OpenAI does not), the last user text (a preview, kept in memory
    only), and the Ollama `options` / OpenAI sampling fields it set."""

    model: str | None = None
    stream: bool = True
    prompt: str = ""
    options: dict[str, Any] = field(default_factory=dict)


OPENAI_OPTION_KEYS = ("max_tokens", "max_completion_tokens", "temperature", "top_p", "seed",
                      "stop", "n")


def read_request(api: str, shape: str, body: bytes) -> RequestFacts:
    """The facts of a generation request's body; a body that is not a JSON object gives
    empty facts (the upstream will answer it with its own 400, which is forwarded)."""
    try:
        obj = json.loads(body)
    except ValueError:
        return RequestFacts(stream=api == "ollama")
    if not isinstance(obj, dict):
        return RequestFacts(stream=api == "ollama")
    model = obj.get("model") if isinstance(obj.get("model"), str) else None
    stream = obj.get("stream")
    streams = stream if isinstance(stream, bool) else api == "ollama"
    options: dict[str, Any] = {}
    if api == "ollama" and isinstance(obj.get("options"), dict):
        options = dict(obj["options"])
    elif api == "openai":
        options = {k: obj[k] for k in OPENAI_OPTION_KEYS if k in obj}
    return RequestFacts(model, streams, _prompt_of(obj, shape), options)


def _prompt_of(obj: Mapping[str, Any], shape: str) -> str:
    """The last user message's text (chat), else the prompt."""
    if shape == "chat":
        for message in reversed(obj.get("messages") or []):
            if isinstance(message, dict) and message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, str):
                    return content
                if isinstance(content, list):  # OpenAI content parts
                    return " ".join(str(p.get("text", "")) for p in content
                                    if isinstance(p, dict))
        return ""
    prompt = obj.get("prompt")
    return prompt if isinstance(prompt, str) else ""


class Meter:
    """Reads one response's body blocks into StreamEvents (`events`), for one endpoint.

    api / shape: from `endpoint_of`; streamed: the request asked for a stream; status: the
    upstream's HTTP status; peer: names the upstream in failures; model: the model asked for
    (a 404 naming it is MODEL_NOT_FOUND). `feed(block, t_ns)` for
    each block as it arrived; `end(t_ns)` when the body ended (a truncation when no done
    event came), `cut(t_ns)` when the client left (no final event: status cancelled).
    `done`: the final event was read (further bytes are ignored).
    """

    def __init__(self, api: str, shape: str, *, streamed: bool, status: int, peer: Peer,
                 encoding: str = "identity", model: str = "") -> None:
        self.api, self.shape, self.streamed, self.status = api, shape, streamed, status
        self.model = model
        self.peer = peer
        self.events: list[StreamEvent] = []
        self.done = False
        self.text_chars = 0  # characters of text in `events`
        self._buf = bytearray()
        self._last_ns: int | None = None  # when the last block of a whole body arrived
        self._whole = not streamed or status != 200
        self._reader = ChunkReader()
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._lines = SSELineDecoder()
        self._sse = SSEDecoder()
        self._bounds: ReplyBounds | None = None
        self._undecodable: Failure | None = None  # recorded at the body's first block
        encoding = encoding.strip().lower() or "identity"
        if encoding != "identity" and ReplyBounds.wbits_for(encoding) is None:
            self._undecodable = Failure(
                FailureKind.PROTOCOL,
                f"an answer compressed as {encoding[:40]!r}, which the watch does not decode "
                "(gzip and deflate it does): passed on unmeasured",
                "have the app ask for no compression (Accept-Encoding: identity), or gzip")
        else:
            # a whole body is one JSON document (no line bound); a stream's lines are bounded
            self._bounds = ReplyBounds(
                ReplyBounds.wbits_for(encoding),
                MAX_DECODED_BYTES if self._whole else MAX_LINE_BYTES, MAX_DECODED_BYTES)

    def feed(self, block: bytes, t_ns: int) -> None:
        """One block of the body, arrived at perf_counter ns `t_ns`."""
        if self.done:
            return
        if self._bounds is None:
            assert self._undecodable is not None
            self._fail(self._undecodable, t_ns)
            return
        try:
            for piece in self._bounds.pieces(block):
                self._piece(piece, t_ns)
                if self.done:
                    return
        except ReplyTooLarge as exc:
            self._limit(f"{exc}", t_ns)

    def _piece(self, piece: bytes, t_ns: int) -> None:
        if self._whole:
            if len(self._buf) < MAX_ERROR_BYTES or self.status == 200:
                self._buf += piece
            self._last_ns = t_ns
        elif self.api == "ollama":
            self._feed_lines(piece, t_ns)
        else:
            self._feed_sse(piece, t_ns)

    def end(self, t_ns: int) -> None:
        """The body ended at `t_ns`: finish a whole (non-streamed or error) body, a last
        line without its newline, or record the truncation."""
        if self.done:
            return
        if self._undecodable is not None:
            self._fail(self._undecodable, t_ns)
            return
        if self._whole:  # the answer arrived with its last block, not at the end's notice
            self._read_whole(self._last_ns if self._last_ns is not None else t_ns)
        elif self.api == "ollama" and self._buf.strip():
            self._line(bytes(self._buf), t_ns)
        elif self.api == "openai":
            for line in self._lines.flush():
                self._sse_line(line, t_ns)
        if self.done:
            return
        if self.api == "openai" and self._reader.finish_reason is not None:
            self._final(StreamEvent(t_ns, done=True, stats=self._reader.stats()))
        else:
            self._fail(failure_truncated(self.peer), t_ns)

    def _add(self, event: StreamEvent) -> None:
        """Keep a chunk's event, or end the measurement at MAX_EVENTS / MAX_TEXT_CHARS."""
        chars = len(event.content) + len(event.thinking) + len(event.tool_calls)
        if len(self.events) >= MAX_EVENTS or self.text_chars + chars > MAX_TEXT_CHARS:
            self._limit(f"an answer past {len(self.events)} chunks and {self.text_chars} "
                        "characters", event.t_ns)
            return
        self.text_chars += chars
        self.events.append(event)

    def _limit(self, what: str, t_ns: int) -> None:
        self._fail(Failure(FailureKind.LIMIT,
                           f"{what}: measured up to there; the app got the whole answer",
                           "an answer this size is not one an LLM request makes; check the "
                           "engine (is it stopping at num_predict / max_tokens?)"), t_ns)

    # ---------------------------------------------------------------- Ollama NDJSON

    def _feed_lines(self, block: bytes, t_ns: int) -> None:
        end = block.rfind(b"\n")
        if end < 0:  # the line goes on: only the new bytes are looked at, and kept in place
            self._buf += block
            return
        head, rest = block[:end], block[end + 1:]
        if self._buf:
            self._buf += head
            head = bytes(self._buf)
        self._buf = bytearray(rest)
        for line in head.split(b"\n"):
            if line.strip() and not self.done:
                self._line(line, t_ns)

    def _line(self, line: bytes, t_ns: int) -> None:
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            shown = line[:120].decode(errors="replace")
            self._fail(failure_protocol(f"a line that is not Ollama's protocol: {shown!r}",
                                        peer=self.peer), t_ns)
            return
        self._ollama_object(obj, t_ns)

    def _ollama_object(self, obj: dict[str, Any], t_ns: int) -> None:
        if obj.get("error") is not None:
            self._fail(failure_in_stream(str(obj["error"]), peer=self.peer), t_ns)
            return
        source = obj.get("message") if self.shape == "chat" else obj
        source = source if isinstance(source, dict) else {}
        text = source.get("content") if self.shape == "chat" else source.get("response")
        content = text if isinstance(text, str) else ""
        thought = source.get("thinking")
        thinking = thought if isinstance(thought, str) else ""
        # a tool call is the model's output too (in a chunk of its own, or in the done line)
        tools = tool_call_text(source.get("tool_calls")) if self.shape == "chat" else ""
        if obj.get("done"):
            self._final(StreamEvent(t_ns, content, thinking, done=True,
                                    stats=ServerStats.from_mapping(obj), tool_calls=tools))
        else:
            self._add(StreamEvent(t_ns, content, thinking, tool_calls=tools))

    # ---------------------------------------------------------------- OpenAI SSE

    def _feed_sse(self, block: bytes, t_ns: int) -> None:
        for line in self._lines.decode(self._text.decode(block)):
            if self.done:
                return
            self._sse_line(line, t_ns)

    def _sse_line(self, line: str, t_ns: int) -> None:
        sse = self._sse.decode(line)
        if sse is None:
            return
        if sse.event == "error":
            self._fail(failure_in_stream(error_body_text(sse.data), peer=self.peer), t_ns)
            return
        data = sse.data.strip()
        if not data:
            return
        if data == "[DONE]":
            if self._reader.finish_reason is None:
                self._fail(failure_truncated(self.peer), t_ns)
            else:
                self._final(StreamEvent(t_ns, done=True, stats=self._reader.stats()))
            return
        try:
            obj = json.loads(data)
            content, thinking = self._reader.read(obj)
            if self.shape == "completions":
                content = _completion_text(obj)
        except StreamError as exc:
            self._fail(failure_in_stream(str(exc), peer=self.peer), t_ns)
            return
        except (ValueError, TypeError, AttributeError, IndexError) as exc:
            detail = f"an event that is not OpenAI's protocol: {type(exc).__name__}: {exc}"
            self._fail(failure_protocol(detail, peer=self.peer), t_ns)
            return
        tools = self._reader.tool_calls
        if content or thinking or tools:
            self._add(StreamEvent(t_ns, content, thinking, tool_calls=tools))

    # ---------------------------------------------------------------- whole bodies

    def _read_whole(self, t_ns: int) -> None:
        body = bytes(self._buf)
        if self.status != 200:
            self._fail(failure_for_http(self.status, body, peer=self.peer, model=self.model),
                       t_ns)
            return
        try:
            obj = json.loads(body)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            shown = body[:120].decode(errors="replace")
            self._fail(failure_protocol(f"a reply that is not JSON: {shown!r}",
                                        peer=self.peer), t_ns)
            return
        if self.api == "ollama":
            self._ollama_object(obj, t_ns)
            return
        if obj.get("error") is not None:
            self._fail(failure_in_stream(error_body_text(body), peer=self.peer), t_ns)
            return
        self._reader.read(obj)
        content, thinking = _message_texts(obj, self.shape)
        message = _choice(obj).get("message")
        tools = tool_call_text(message.get("tool_calls")) if isinstance(message, Mapping) else ""
        self._final(StreamEvent(t_ns, content, thinking, done=True, stats=self._reader.stats(),
                                tool_calls=tools))

    # ---------------------------------------------------------------- endings

    def _final(self, event: StreamEvent) -> None:
        self.events.append(event)
        self.done = True

    def _fail(self, failure: Failure, t_ns: int) -> None:
        self._final(StreamEvent(t_ns, done=True, failure=failure))


def _choice(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    choices = obj.get("choices") or []
    return choices[0] if choices and isinstance(choices[0], Mapping) else {}


def _completion_text(obj: Mapping[str, Any]) -> str:
    """A `/completions` chunk's text (`choices[0].text`)."""
    text = _choice(obj).get("text")
    return text if isinstance(text, str) else ""


def _message_texts(obj: Mapping[str, Any], shape: str) -> tuple[str, str]:
    """(answer, thinking) of a non-streamed OpenAI reply."""
    if shape == "completions":
        return _completion_text(obj), ""
    message = _choice(obj).get("message")
    if not isinstance(message, Mapping):
        return "", ""
    text = message.get("content")
    thinking = next((str(message[k]) for k in THINKING_KEYS if isinstance(message.get(k), str)),
                    "")
    return (text if isinstance(text, str) else ""), thinking
