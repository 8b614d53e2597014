"""Validation of a `POST /api/stream` body, and the exact upstream request it becomes.

The relay's upstream is fixed when it starts: a body naming a host ("host", "upstream", "url",
"base_url") is refused, never followed. Any other unknown field is refused by name too, so a
misplaced generation option cannot silently fall back to the engine's default.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from llmtop.engines.http import BadRequest
from llmtop.engines.openai_options import request_body
from llmtop.servers.embedded.requests import parse_keep_alive, parse_options
from llmtop.servers.guard import wrong_type
from llmtop.stamping.bounds import chunk_limit

REDIRECT_KEYS = ("host", "upstream", "url", "base_url")
ACCEPTED_KEYS = frozenset(
    {"model", "messages", "prompt", "options", "think", "keep_alive", "stream"}
)
OPTION_NAMES = frozenset(
    {"temperature", "seed", "num_predict", "num_ctx", "top_k", "top_p", "min_p", "stop",
     "repeat_penalty", "num_thread"}
)
THINK_LEVELS = ("low", "medium", "high")

dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


@dataclass(frozen=True, slots=True)
class StreamJob:
    """A validated `/api/stream` request: the upstream path and the exact body to send."""

    path: str  # "/api/chat", "/api/generate", or "/chat/completions" (an OpenAI upstream)
    model: str
    payload: bytes
    notes: tuple[str, ...] = ()  # what an OpenAI upstream could not be sent (openai_options)
    # the most text chunks relayed before the stream is ended (stamping/bounds.chunk_limit of
    # the request's num_predict); None: no limit asked for
    max_chunks: int | None = None
    num_predict: int | None = None

    @property
    def chat(self) -> bool:
        """True for /api/chat (text under message.content), False for /api/generate."""
        return self.path == "/api/chat"


def parse_stream_request(body: Any, api: str = "ollama") -> StreamJob:
    """Validate a `/api/stream` body and build the upstream request. Raises BadRequest.

    api "openai": the same body becomes a streamed `chat/completions` request with usage
    asked for (`llmtop.engines.openai_options.request_body`); `prompt` is refused there.

    Accepted: model (str), exactly one of messages (list of objects) or prompt (str),
    options (object), think (bool or "low"/"medium"/"high"), keep_alive (str or number).
    Fields that would name another host are refused as such; any other unknown field is
    refused too (a misplaced `num_predict` must not silently generate 200 tokens). Options
    and keep_alive are held to the embedded engine's types and ranges before anything is
    forwarded (`llmtop.servers.embedded.requests`: num_thread at most this machine's cores,
    C integer ranges, keep_alive within a Go duration).
    """
    _check_keys(body)
    model = body.get("model")
    if model is None or (isinstance(model, str) and not model.strip()):
        raise BadRequest("model is required (a non-empty string)")
    if not isinstance(model, str):
        raise wrong_type("model", "a string", model)
    out: dict[str, Any] = {"model": model}
    path = _text_field(body, out)
    out["stream"] = True
    options = body.get("options")
    if options is not None:
        parse_options(options)
        out["options"] = options
    think = body.get("think")
    if think is not None:
        if not (isinstance(think, bool) or think in THINK_LEVELS):
            raise wrong_type("think", "true, false, 'low', 'medium' or 'high'", think)
        out["think"] = think
    keep_alive = body.get("keep_alive")
    if keep_alive is not None:
        parse_keep_alive(keep_alive)
        out["keep_alive"] = keep_alive
    predict = options.get("num_predict") if isinstance(options, dict) else None
    most = chunk_limit({"num_predict": predict})
    asked = predict if isinstance(predict, int) else None
    if api == "openai":
        return replace(_openai_job(out), max_chunks=most, num_predict=asked)
    return StreamJob(path, model, dumps(out).encode(), max_chunks=most, num_predict=asked)


def _openai_job(out: dict[str, Any]) -> StreamJob:
    """The validated Ollama-shaped request `out` as an OpenAI streamed chat."""
    if "messages" not in out:
        raise BadRequest("'prompt' needs an Ollama-API upstream: send 'messages' to an OpenAI "
                         "upstream")
    body, notes = request_body(out["model"], out["messages"], out.get("options"),
                               think=out.get("think"), keep_alive=out.get("keep_alive"))
    body["stream_options"] = {"include_usage": True}
    return StreamJob("/chat/completions", out["model"], dumps(body).encode(), tuple(notes))


def _check_keys(body: Any) -> None:
    if not isinstance(body, dict):
        raise wrong_type("the request body", "a JSON object", body)
    for key in REDIRECT_KEYS:
        if key in body:
            raise BadRequest(
                f"'{key}' is not accepted: the relay's upstream is fixed when it starts "
                "(llmtop relay --upstream URL)"
            )
    unknown = sorted(set(body) - ACCEPTED_KEYS)
    if unknown:
        hint = ' (generation options go inside "options")' if set(unknown) & OPTION_NAMES else ""
        accepted = ", ".join(sorted(ACCEPTED_KEYS))
        raise BadRequest(f"unknown field(s) {', '.join(unknown)}: accepted are {accepted}{hint}")


def _text_field(body: dict[str, Any], out: dict[str, Any]) -> str:
    """Copy messages or prompt into `out`; return the upstream path they go to."""
    messages, prompt = body.get("messages"), body.get("prompt")
    if (messages is None) == (prompt is None):
        raise BadRequest("send exactly one of 'messages' (a list) or 'prompt' (a string)")
    if messages is not None:
        if not isinstance(messages, list):
            raise wrong_type("messages", "a list of objects", messages)
        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                raise wrong_type(f"messages[{i}]", "an object", message)
        out["messages"] = messages
        return "/api/chat"
    if not isinstance(prompt, str):
        raise wrong_type("prompt", "a string", prompt)
    out["prompt"] = prompt
    return "/api/generate"
