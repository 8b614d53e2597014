"""What an OpenAI-compatible chat stream means, chunk by chunk (pure, no I/O).

`ChunkReader` reads the JSON objects of a `POST /v1/chat/completions` stream (`stream: true`)
as httpx-sse hands them over and keeps what the end of the request needs: the finish reason,
the last `usage`, llama.cpp's `timings`, LM Studio's `stats`. `ChunkReader.stats()` maps them
onto `ServerStats` (Ollama's names and units) and names the source. Shapes from
docs/protocols.md, "OpenAI-compatible servers" (the OpenAI stream, llama-server, Ollama's
`/v1`, vLLM, LM Studio, llama-cpp-python's server).

The mapping, field by field (absent stays None, never 0):

| ServerStats            | usage                       | llama.cpp `timings`   | LM Studio `stats`
|
|------------------------|-----------------------------|-----------------------|----------------------------|
| prompt_eval_count      | prompt_tokens               | prompt_n + cache_n    | input_tokens
|
| prompt_eval_duration   | –                           | prompt_ms × 1e6       |
time_to_first_token(_seconds) × 1e9 |
| eval_count             | completion_tokens           | predicted_n           | total_output_tokens
|
| eval_duration          | –                           | predicted_ms × 1e6    | generation_time ×
1e9      |
| prompt_cached_count    | prompt_tokens_details.cached_tokens | cache_n       | –
|
| done_reason            | the last `finish_reason` ("stop", "length", …)
|
| draft_count            | –                           | draft_n               | –
|
| draft_accepted_count   | –                           | draft_n_accepted      | –
|

llama-server's extras, asked for by `OpenAIEngine` (docs/protocols.md, "llama-server"): with
`timings_per_token` every chunk carries the cumulative `timings`, so each chunk's own token
count is the growth of `predicted_n` (`ChunkReader.chunk_tokens`); with `return_progress`
chunks without text carry `prompt_progress` {total, cache, processed, time_ms}
(`ChunkReader.progress`), which never start TTFT.

`usage` wins over the other two for counts (it is the OpenAI field every server fills the same
way); `prompt_eval_count` counts cached tokens too, as Ollama's does. Load and total
durations have no OpenAI counterpart and stay None.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmtop.engines.events import PromptProgress, ServerStats, tool_call_text

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
# Where the generated text of a delta can be: the answer, and the two names reasoning models
# stream their thinking under (llama-server/old vLLM: reasoning_content; Ollama /v1, vLLM:
# reasoning). TTFT starts at the first non-empty one of any of them.
THINKING_KEYS = ("reasoning_content", "reasoning")


class StreamError(Exception):
    """The server reported an error inside the stream; `message` is its text."""


def _count(value: Any) -> int | None:
    """A token count: a non-negative int (not bool), else None."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _duration_ns(value: Any, scale: int) -> int | None:
    """A non-negative number of ms (scale 1e6) or s (scale 1e9) → int ns, else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return round(value * scale)
    return None


def error_text(error: Any) -> str:
    """The message of an OpenAI-style error (`{"message": ..., "type": ...}` or a string)."""
    if isinstance(error, Mapping):
        return str(error.get("message") or error.get("type") or error)
    return str(error)


def error_body_text(raw: bytes | str) -> str:
    """The message of an error reply or event: OpenAI's `{"error": {"message": ...}}`,
    FastAPI's `{"detail": ...}`, Ollama's `{"error": "..."}`, else the text itself."""
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    try:
        obj = json.loads(text)
    except ValueError:
        return text.strip()
    if isinstance(obj, dict) and obj.get("error") is not None:
        return error_text(obj["error"])
    if isinstance(obj, dict) and obj.get("detail") is not None:
        return str(obj["detail"])
    return text.strip()


@dataclass
class ChunkReader:
    """Reads one stream's chunks (parsed JSON objects), in order.

    finish_reason: the last non-null `choices[0].finish_reason` ("stop", "length" — truncated
    by max tokens, not an error — "tool_calls", …). usage / timings / lm_stats: the last
    object of each kind seen (vLLM's `continuous_usage_stats` sends a cumulative usage on
    every chunk: the last one is the total). chunks: objects read. chunk_tokens: the tokens
    the last chunk read added to `timings.predicted_n` (None when it had no timings);
    progress: the last chunk's `prompt_progress` (None when it had none). tool_calls: the
    tool-call text of the last chunk read (`events.tool_call_text` of `delta.tool_calls`, and
    of the older `delta.function_call`), "" for none: a tool call is the model's output, so
    a caller makes a text event of a chunk that has only it (beside `"content": ""`).
    """

    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    lm_stats: dict[str, Any] | None = None
    chunks: int = 0
    chunk_tokens: int | None = None
    progress: PromptProgress | None = None
    tool_calls: str = ""

    def read(self, obj: Any) -> tuple[str, str]:
        """One chunk → (answer text, thinking text), either may be empty. A role-only or empty
        delta, a usage-only chunk (`choices: []`) give ("", ""). Raises StreamError for an
        `error` object and TypeError for a chunk that is not a JSON object."""
        if not isinstance(obj, Mapping):
            raise TypeError(f"a chunk that is not a JSON object: {obj!r:.80}")
        self.chunks += 1
        self.tool_calls = ""
        if obj.get("error") is not None:
            raise StreamError(error_text(obj["error"]))
        before = _count((self.timings or {}).get("predicted_n")) or 0
        after = _count(obj["timings"].get("predicted_n")) if isinstance(
            obj.get("timings"), Mapping) else None
        self.chunk_tokens = None if after is None else max(after - before, 0)
        self.progress = _progress(obj.get("prompt_progress"))
        for key, slot in (("usage", "usage"), ("timings", "timings"), ("stats", "lm_stats")):
            if isinstance(obj.get(key), Mapping):
                setattr(self, slot, dict(obj[key]))
        choices = obj.get("choices") or []
        if not choices or not isinstance(choices[0], Mapping):
            return "", ""
        choice = choices[0]
        if isinstance(choice.get("finish_reason"), str):
            self.finish_reason = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, Mapping):
            return "", ""
        content = delta.get("content")
        thinking = next((delta[k] for k in THINKING_KEYS if isinstance(delta.get(k), str)), "")
        legacy = delta.get("function_call")
        self.tool_calls = tool_call_text(delta.get("tool_calls")) + tool_call_text(
            [{"function": legacy}] if isinstance(legacy, Mapping) else None)
        return (content if isinstance(content, str) else ""), thinking

    def stats(self) -> ServerStats:
        """The server's figures for the request, mapped as the module docstring says."""
        usage, timings, lm = self.usage or {}, self.timings or {}, self.lm_stats or {}
        sources = [name for name, obj in (("usage", self.usage), ("llama.cpp timings",
                   self.timings), ("LM Studio stats", self.lm_stats)) if obj]
        cached = _count(timings.get("cache_n"))
        details = usage.get("prompt_tokens_details")
        if isinstance(details, Mapping) and _count(details.get("cached_tokens")) is not None:
            cached = _count(details.get("cached_tokens"))
        prompt_n = _count(timings.get("prompt_n"))
        timed_prompt = (
            prompt_n + (_count(timings.get("cache_n")) or 0) if prompt_n is not None else None
        )
        first = lm.get("time_to_first_token", lm.get("time_to_first_token_seconds"))
        return ServerStats(
            prompt_eval_count=_first(_count(usage.get("prompt_tokens")), timed_prompt,
                                     _count(lm.get("input_tokens"))),
            prompt_eval_duration=_first(_duration_ns(timings.get("prompt_ms"), NS_PER_MS),
                                        _duration_ns(first, NS_PER_S)),
            eval_count=_first(_count(usage.get("completion_tokens")),
                              _count(timings.get("predicted_n")),
                              _count(lm.get("total_output_tokens"))),
            eval_duration=_first(_duration_ns(timings.get("predicted_ms"), NS_PER_MS),
                                 _duration_ns(lm.get("generation_time"), NS_PER_S)),
            done_reason=self.finish_reason,
            prompt_cached_count=cached,
            source=" + ".join(sources) or "none",
            draft_count=_count(timings.get("draft_n")),
            draft_accepted_count=_count(timings.get("draft_n_accepted")),
        )


def _progress(value: Any) -> PromptProgress | None:
    """llama-server's `prompt_progress` object, or None for anything else."""
    if not isinstance(value, Mapping):
        return None
    total, cache, done = (_count(value.get(k)) for k in ("total", "cache", "processed"))
    time_ms = value.get("time_ms")
    if total is None or cache is None or done is None or not isinstance(
            time_ms, int | float) or isinstance(time_ms, bool):
        return None
    return PromptProgress(total, cache, done, float(time_ms))


def _first(*values: int | None) -> int | None:
    return next((v for v in values if v is not None), None)
