"""Validation of Ollama API request bodies for the embedded engine.

Each check raises `BadRequest` with a message that names the field and what was wrong, which
the server returns as HTTP 400 `{"error": "..."}` (Ollama's shape: docs/protocols.md, "Errors").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from llmtop.engines.http import BadRequest
from llmtop.engines.llama_backend import DEFAULT_SAMPLING, Sampling

DEFAULT_KEEP_ALIVE_S = 300.0  # Ollama's OLLAMA_KEEP_ALIVE default: 5 minutes
_GO_DURATION = re.compile(r"^(-?)((?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+)$")
_GO_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_GO_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
ROLES = ("system", "user", "assistant", "tool")

__all__ = ["BadRequest", "ParsedRequest", "parse_body", "parse_keep_alive", "parse_request"]


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    """A validated /api/chat or /api/generate request.

    messages: chat messages, or None for /api/generate. prompt: the generate prompt.
    load_only: True when there was nothing to generate (Ollama loads the model and answers
    `done_reason: "load"`). keep_alive_s: seconds; negative = forever, 0 = unload after.
    """

    model: str
    stream: bool
    sampling: Sampling
    num_ctx: int | None
    num_thread: int | None
    keep_alive_s: float
    messages: list[dict[str, str]] | None = None
    prompt: str = ""
    system: str | None = None
    raw: bool = False
    load_only: bool = False
    options: dict[str, Any] = field(default_factory=dict)


def parse_body(raw: bytes) -> dict[str, Any]:
    """Bytes → a JSON object, or BadRequest naming the problem."""
    if not raw.strip():
        raise BadRequest("missing request body")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"invalid JSON in request body: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


def parse_keep_alive(value: Any) -> float:
    """Ollama's keep_alive: a number of seconds or a Go duration ("5m", "1h30m", "-1m").

    Returns seconds; absent → 300 s. Raises BadRequest for anything else.
    """
    if value is None:
        return DEFAULT_KEEP_ALIVE_S
    if isinstance(value, bool):
        raise BadRequest("keep_alive must be a number of seconds or a duration like \"5m\"")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text)
        except ValueError:
            pass
        m = _GO_DURATION.match(text)
        if m:
            total = sum(float(n) * _GO_UNIT_S[u] for n, u in _GO_PART.findall(m.group(2)))
            return -total if m.group(1) else total
    raise BadRequest(f"keep_alive {value!r} is not a duration: use seconds (300) or \"5m\", \"-1\"")


def _option(options: dict[str, Any], name: str, kind: type, default: Any) -> Any:
    value = options.get(name, default)
    if value is None:
        return default
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind is int and isinstance(value, float) and value.is_integer():
        return int(value)
    wanted = "an integer" if kind is int else "a number"
    raise BadRequest(f"option {name!r} must be {wanted}, got {value!r}")


def parse_options(options: Any) -> tuple[Sampling, int | None, int | None]:
    """Ollama `options` → (Sampling, num_ctx, num_thread). Unknown keys are ignored, as Ollama
    does; a known key with the wrong type is a BadRequest."""
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise BadRequest("options must be a JSON object")
    stop = options.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = tuple(stop)
    else:
        raise BadRequest("option 'stop' must be a string or a list of strings")
    num_ctx = _option(options, "num_ctx", int, None)
    if num_ctx is not None and num_ctx < 16:
        raise BadRequest(f"option 'num_ctx' must be at least 16, got {num_ctx}")
    num_thread = _option(options, "num_thread", int, None)
    if num_thread is not None and num_thread <= 0:
        num_thread = None  # Ollama: 0 means "choose for me"
    sampling = Sampling(
        temperature=_option(options, "temperature", float, DEFAULT_SAMPLING["temperature"]),
        top_k=_option(options, "top_k", int, DEFAULT_SAMPLING["top_k"]),
        top_p=_option(options, "top_p", float, DEFAULT_SAMPLING["top_p"]),
        min_p=_option(options, "min_p", float, DEFAULT_SAMPLING["min_p"]),
        repeat_penalty=_option(options, "repeat_penalty", float, DEFAULT_SAMPLING["repeat_penalty"]),
        seed=_option(options, "seed", int, None),
        num_predict=_option(options, "num_predict", int, -1),
        stop=stops,
    )
    return sampling, num_ctx, num_thread


def parse_request(body: dict[str, Any], *, chat: bool, model_name: str) -> ParsedRequest:
    """Validate a chat (`chat=True`) or generate body against the one model served.

    Raises BadRequest (400) for malformed fields, BadRequest(status=404) for another model,
    and 400 for `think` on this model, which has no thinking capability (as Ollama answers).
    """
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise BadRequest("model is required")
    if model != model_name and f"{model}:latest" != model_name:
        raise BadRequest(f"model '{model}' not found", status=404)
    stream = body.get("stream", True)
    if not isinstance(stream, bool):
        raise BadRequest("stream must be true or false")
    think = body.get("think")
    if think not in (None, False):
        if not isinstance(think, bool | str):
            raise BadRequest("think must be true, false or a level (\"low\", \"medium\", \"high\")")
        raise BadRequest(f'"{model_name}" does not support thinking')
    sampling, num_ctx, num_thread = parse_options(body.get("options"))
    common: dict[str, Any] = {
        "model": model_name,
        "stream": stream,
        "sampling": sampling,
        "num_ctx": num_ctx,
        "num_thread": num_thread,
        "keep_alive_s": parse_keep_alive(body.get("keep_alive")),
        "options": dict(body.get("options") or {}),
    }
    if chat:
        messages = body.get("messages")
        if messages is None or messages == []:
            return ParsedRequest(messages=[], load_only=True, **common)
        return ParsedRequest(messages=_parse_messages(messages), **common)
    prompt = body.get("prompt")
    if prompt is not None and not isinstance(prompt, str):
        raise BadRequest("prompt must be a string")
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        raise BadRequest("system must be a string")
    raw = body.get("raw", False)
    if not isinstance(raw, bool):
        raise BadRequest("raw must be true or false")
    if raw and (system or body.get("template") or body.get("context")):
        raise BadRequest("raw mode does not support template, system, or context")
    return ParsedRequest(prompt=prompt or "", system=system, raw=raw, load_only=not prompt, **common)


def _parse_messages(messages: Any) -> list[dict[str, str]]:
    if not isinstance(messages, list):
        raise BadRequest("messages must be a list of {\"role\", \"content\"} objects")
    parsed = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise BadRequest(f"messages[{i}] must be an object with role and content")
        role, content = msg.get("role"), msg.get("content", "")
        if role not in ROLES:
            raise BadRequest(f"messages[{i}].role must be one of {', '.join(ROLES)}, got {role!r}")
        if not isinstance(content, str):
            raise BadRequest(f"messages[{i}].content must be a string")
        parsed.append({"role": role, "content": content})
    return parsed
