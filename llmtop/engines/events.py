"""The small frozen records every engine yields, stamped at the source.

An engine stamps each chunk with `time.perf_counter_ns()` the moment the chunk is available
(its line complete and parsed), before any UI work, and yields a `StreamEvent`. The UI only
displays events; it never measures (docs/architecture.md, "Stamping at the source").
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from llmtop.exitcodes import ExitCode

# Ollama's final-chunk statistics (api/types.go `Metrics`). Durations are nanoseconds,
# counts are tokens. Every field is `omitempty` in Ollama: absent means "zero or unknown",
# which llmtop keeps as None and never turns into a made-up 0.
STAT_FIELDS = (
    "total_duration",
    "load_duration",
    "prompt_eval_count",
    "prompt_eval_duration",
    "eval_count",
    "eval_duration",
)


@dataclass(frozen=True, slots=True)
class ServerStats:
    """What the server says about one request, in Ollama's own field names and units.

    Durations in ns, counts in tokens; None where the server omitted the field.
    `done_reason` is "stop", "length", "load", "unload" or None.
    prompt_cached_count: prompt tokens the server reused from its cache (llama.cpp's
    `cache_n`, OpenAI's `usage.prompt_tokens_details.cached_tokens`); None when not reported.
    source: where the figures came from — None for Ollama's own done chunk, else a label such
    as "usage", "usage + llama.cpp timings", "LM Studio stats" or "none" (an OpenAI-compatible
    server that sent no figures: engines/openai_stream.py).
    draft_count / draft_accepted_count: speculative decoding's drafted tokens and how many of
    them the target model accepted (llama.cpp's `timings.draft_n`, `draft_n_accepted`; None
    without a draft model).
    """

    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_count: int | None = None
    prompt_eval_duration: int | None = None
    eval_count: int | None = None
    eval_duration: int | None = None
    done_reason: str | None = None
    prompt_cached_count: int | None = None
    source: str | None = None
    draft_count: int | None = None
    draft_accepted_count: int | None = None

    @property
    def draft_acceptance(self) -> float | None:
        """Accepted / drafted tokens (0–1), llama.cpp's own `draft_n_accepted / draft_n`;
        None without drafted tokens."""
        if not self.draft_count or self.draft_accepted_count is None:
            return None
        return self.draft_accepted_count / self.draft_count

    @classmethod
    def from_mapping(cls, data: Any) -> ServerStats:
        """Build from a done chunk (a dict or an `ollama` response object).

        Non-integer or negative values are treated as absent, so a malformed server reply
        can never produce a fake measurement.
        """
        values: dict[str, Any] = {}
        for name in (*STAT_FIELDS, *(f for f in OPTIONAL_FIELDS if f != "source")):
            raw = _get(data, name)
            values[name] = (
                raw if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0 else None
            )
        reason = _get(data, "done_reason")
        values["done_reason"] = reason if isinstance(reason, str) and reason else None
        source = _get(data, "source")
        values["source"] = source if isinstance(source, str) and source else None
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (None kept, so "absent" survives a round-trip; the
        fields only OpenAI-compatible engines fill are left out while None, so an Ollama
        record is written as before)."""
        data = asdict(self)
        for name in OPTIONAL_FIELDS:
            if data[name] is None:
                del data[name]
        return data


# Left out of a record while None: only OpenAI-compatible servers fill them.
OPTIONAL_FIELDS = ("prompt_cached_count", "source", "draft_count", "draft_accepted_count")


def _get(data: Any, name: str) -> Any:
    if isinstance(data, dict):
        return data.get(name)
    return getattr(data, name, None)


class Status(StrEnum):
    """How a request ended. Only OK requests are samples for statistics."""

    OK = "ok"
    ERROR = "error"  # the engine reported an error (before or during the stream)
    TRUNCATED = "truncated"  # the stream ended without a `done` chunk
    NO_GENERATION = "no-generation"  # done_reason "load"/"unload": nothing was generated
    CANCELLED = "cancelled"  # the user cancelled (a new prompt, quit)


class FailureKind(StrEnum):
    """Why a request failed, so a caller can pick an exit code or a remedy."""

    UNREACHABLE = "unreachable"  # connection refused / DNS / connect timeout
    TIMEOUT = "timeout"  # connected, then no data within the read timeout
    MODEL_NOT_FOUND = "model-not-found"
    BAD_REQUEST = "bad-request"  # the server rejected the request (4xx)
    SERVER_ERROR = "server-error"  # 5xx or an `{"error": ...}` line mid-stream
    BUSY = "busy"  # 429/503, "server busy", "no slots available": the engine's queue is full
    TRUNCATED = "truncated"
    PROTOCOL = "protocol"  # the server sent something that is not Ollama's protocol
    STALLED = "stalled"  # connected and streaming, then no token within the token timeout
    LIMIT = "limit"  # the reply went past a bound (a line's size, its decompressed size)


@dataclass(frozen=True, slots=True)
class Failure:
    """A specific, actionable failure: what went wrong and what to do about it."""

    kind: FailureKind
    message: str
    remedy: str = ""

    def __str__(self) -> str:
        return f"{self.message} — {self.remedy}" if self.remedy else self.message


@dataclass(frozen=True, slots=True)
class PromptProgress:
    """llama-server's `prompt_progress` (asked for with `return_progress`): the prompt's
    `total` tokens, `cache` of them reused from its cache, `processed` so far (cached ones
    included), and `time_ms` since the request's prompt processing started (the server's
    clock). A progress chunk carries no text: it never starts TTFT."""

    total: int
    cache: int
    processed: int
    time_ms: float

    @property
    def share(self) -> float | None:
        """Processed / total (0–1); None for an empty prompt."""
        return min(self.processed / self.total, 1.0) if self.total > 0 else None


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One chunk of a streamed response, or the end of the stream.

    t_ns: `time.perf_counter_ns()` when the chunk became available to the client.
    content / thinking: text carried by this chunk (either may be empty).
    done: True on the final event (the server's done chunk, or a failure/truncation).
    stats: the server's statistics, on the done chunk only.
    failure: set when the request ended badly; text already yielded is kept by the caller.
    tokens: how many tokens the server says this chunk carried (llama-server's cumulative
    `timings.predicted_n` with `timings_per_token`, differenced); None when it does not say.
    progress: the server's prompt-processing progress (a chunk without text); None otherwise.
    tool_calls: the tool-call text this chunk carried (`tool_call_text`): the model's output
    as much as content is, so it starts TTFT and counts as a text chunk; "" for none.
    """

    t_ns: int
    content: str = ""
    thinking: str = ""
    done: bool = False
    stats: ServerStats | None = None
    failure: Failure | None = None
    tokens: int | None = None
    progress: PromptProgress | None = None
    tool_calls: str = ""

    @property
    def has_text(self) -> bool:
        """True when the chunk carries generated text: content, thinking or a tool call's
        pieces (TTFT counts these)."""
        return bool(self.content or self.thinking or self.tool_calls)


def tool_call_text(calls: Any) -> str:
    """The text a model generated for the tool calls of one message or delta: each call's
    function name, then its arguments ("get_weather" + '{"city": "Tokyo"}').

    calls: a list of calls, dicts or objects with a `function` whose `name` is a string and
    whose `arguments` are either a string (OpenAI's chat stream: the JSON's fragments, spread
    over deltas, `delta.tool_calls[].function.arguments`) or an object (Ollama's
    `message.tool_calls[].function.arguments`, each call whole in one chunk; written as JSON).
    Server-made fields (`id`, `type`, `index`) are not the model's text and are left out.
    Anything else (None, not a list, a call without a function) gives ""; never raises.
    """
    if not isinstance(calls, list | tuple):
        return ""
    parts: list[str] = []
    for call in calls:
        function = _get(call, "function")
        if function is None:
            continue
        name = _get(function, "name")
        if isinstance(name, str):
            parts.append(name)
        arguments = _get(function, "arguments")
        if isinstance(arguments, str):
            parts.append(arguments)
        elif arguments is not None:
            with contextlib.suppress(TypeError, ValueError):
                parts.append(json.dumps(dict(arguments) if isinstance(arguments, Mapping)
                                        else arguments, ensure_ascii=False, default=str))
    return "".join(parts)


def exit_code_for(kind: FailureKind) -> ExitCode:
    """The one map from why something failed to what the process reports (README.md, "Exit
    codes"). Used by `run`, `bench` and the TUI for connecting and for requests alike:

    UNREACHABLE (nothing answers; a child engine that failed to start) → ENGINE_UNREACHABLE;
    MODEL_NOT_FOUND → MODEL_NOT_FOUND; BAD_REQUEST (a bad --model-path, an unknown --engine,
    a request the server refused) → USAGE; everything else (a read timeout after connecting,
    an error mid-stream, a truncated stream, a protocol error) → REQUEST_FAILED.
    """
    return _EXIT_FOR_KIND.get(kind, ExitCode.REQUEST_FAILED)


_EXIT_FOR_KIND = {
    FailureKind.UNREACHABLE: ExitCode.ENGINE_UNREACHABLE,
    FailureKind.MODEL_NOT_FOUND: ExitCode.MODEL_NOT_FOUND,
    FailureKind.BAD_REQUEST: ExitCode.USAGE,
}
