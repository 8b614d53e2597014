"""Validation of Ollama API request bodies for the embedded engine (and the relay's options).

Each check raises `BadRequest` with a message that names the field and what was wrong, which
the server returns as HTTP 400 `{"error": "..."}` (Ollama's shape: docs/protocols.md, "Errors").
Options that could exhaust the machine are held to what it has: `num_thread` to its logical
cores, integers to the C types llama.cpp stores them in, `keep_alive` to a Go duration's
range (Ollama's type for it). What the body may hold at all (size, depth, NaN, surrogates) is
checked first, by `llmtop.servers.guard`.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from llmtop.engines.http import BadRequest
from llmtop.servers.embedded.llama_backend import DEFAULT_SAMPLING, Sampling
from llmtop.servers.guard import parse_json, wrong_type

DEFAULT_KEEP_ALIVE_S = 300.0  # Ollama's OLLAMA_KEEP_ALIVE default: 5 minutes
_GO_DURATION = re.compile(r"^(-?)((?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+)$")
_GO_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_GO_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
ROLES = ("system", "user", "assistant", "tool")
INT32_MAX = 2**31 - 1  # llama.cpp keeps n_ctx, top_k, n_predict in C ints
INT64_MAX = 2**63 - 1  # Ollama's seed is a Go int; a Go duration is int64 nanoseconds
MAX_KEEP_ALIVE_S = INT64_MAX / 1e9  # about 292 years
INT_RANGES = {  # option: (lowest, highest) accepted
    "num_ctx": (16, INT32_MAX),
    "top_k": (-INT32_MAX, INT32_MAX),
    "num_predict": (-INT32_MAX, INT32_MAX),
    "seed": (-INT64_MAX - 1, INT64_MAX),
}

__all__ = ["BadRequest", "ParsedRequest", "parse_body", "parse_keep_alive", "parse_options",
           "parse_request"]


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
    """Bytes → a JSON object (`guard.parse_json`'s rules), or BadRequest naming the problem."""
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise wrong_type("the request body", "a JSON object", body)
    return body


def parse_keep_alive(value: Any) -> float:
    """Ollama's keep_alive: a number of seconds or a Go duration ("5m", "1h30m", "-1m").

    Returns seconds; absent → 300 s. Raises BadRequest for anything else, and for a value
    beyond a Go duration's range (int64 ns, about ±292 years), where Ollama fails too.
    """
    if value is None:
        return DEFAULT_KEEP_ALIVE_S
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise wrong_type("keep_alive", 'a number of seconds or a duration like "5m"', value)
    seconds = _keep_alive_seconds(value)
    if seconds is None:
        raise BadRequest(f"keep_alive {value!r} is not a duration: use seconds (300) or "
                         '"5m", "-1"')
    if not math.isfinite(seconds) or abs(seconds) > MAX_KEEP_ALIVE_S:
        raise BadRequest(f"keep_alive {value!r} is out of range: at most {MAX_KEEP_ALIVE_S:.4g} "
                         "seconds either way (a negative value keeps the model loaded)")
    return seconds


def _keep_alive_seconds(value: float | str) -> float | None:
    if not isinstance(value, str):
        return float(value)
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    m = _GO_DURATION.match(text)
    if m is None:
        return None
    total = sum(float(n) * _GO_UNIT_S[u] for n, u in _GO_PART.findall(m.group(2)))
    return -total if m.group(1) else total


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
    raise wrong_type(f"option {name!r}", "an integer" if kind is int else "a number", value)


def _int_option(options: dict[str, Any], name: str, default: Any) -> Any:
    """An integer option held to INT_RANGES[name] (the C type llama.cpp keeps it in)."""
    value = _option(options, name, int, default)
    low, high = INT_RANGES[name]
    if value is not None and not low <= value <= high:
        raise BadRequest(f"option {name!r} must be from {low} to {high}, got {value}")
    return value


def _num_thread(options: dict[str, Any]) -> int | None:
    """num_thread: 0 or less lets the engine choose (Ollama's 0); more than the machine's
    logical cores is refused: each thread spins on a core, and thousands of them starve
    every later request."""
    value = _option(options, "num_thread", int, None)
    if value is None or value <= 0:
        return None
    cores = os.cpu_count() or 1
    if value > cores:
        raise BadRequest(f"option 'num_thread' is {value}, more than this machine's {cores} "
                         f"logical cores: use at most {cores}, or 0 to let the engine choose")
    return int(value)


def parse_options(options: Any) -> tuple[Sampling, int | None, int | None]:
    """Ollama `options` → (Sampling, num_ctx, num_thread). Unknown keys are ignored, as Ollama
    does; a known key with the wrong type is a BadRequest."""
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise wrong_type("options", "a JSON object", options)
    stop = options.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = tuple(stop)
    else:
        raise BadRequest("option 'stop' must be a string or a list of strings")
    num_ctx = _int_option(options, "num_ctx", None)
    num_thread = _num_thread(options)
    sampling = Sampling(
        temperature=_option(options, "temperature", float, DEFAULT_SAMPLING["temperature"]),
        top_k=_int_option(options, "top_k", DEFAULT_SAMPLING["top_k"]),
        top_p=_option(options, "top_p", float, DEFAULT_SAMPLING["top_p"]),
        min_p=_option(options, "min_p", float, DEFAULT_SAMPLING["min_p"]),
        repeat_penalty=_option(
            options, "repeat_penalty", float, DEFAULT_SAMPLING["repeat_penalty"]
        ),
        seed=_int_option(options, "seed", None),
        num_predict=_int_option(options, "num_predict", -1),
        stop=stops,
    )
    return sampling, num_ctx, num_thread


def parse_request(body: dict[str, Any], *, chat: bool, model_name: str) -> ParsedRequest:
    """Validate a chat (`chat=True`) or generate body against the one model served.

    Raises BadRequest (400) for malformed fields (naming the field and the type expected),
    BadRequest(status=404) for another model, and 400 for what this model cannot honour:
    `think` (no thinking capability, as Ollama answers), `images`, `format`, `tools`.
    """
    model = body.get("model")
    if model is None or model == "" or (isinstance(model, str) and not model.strip()):
        raise BadRequest("model is required")
    if not isinstance(model, str):
        raise wrong_type("model", "a string", model)
    if model != model_name and f"{model}:latest" != model_name:
        raise BadRequest(f"model '{model}' not found", status=404)
    stream = body.get("stream", True)
    if not isinstance(stream, bool):
        raise wrong_type("stream", "true or false", stream)
    think = body.get("think")
    if think not in (None, False):
        if not isinstance(think, bool | str):
            raise wrong_type("think", 'true, false or a level ("low", "medium", "high")', think)
        raise BadRequest(f'"{model_name}" does not support thinking')
    _refuse_unsupported(body, model_name, chat)
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
        return ParsedRequest(messages=_parse_messages(messages, model_name), **common)
    return _parse_generate(body, common)


def _parse_generate(body: dict[str, Any], common: dict[str, Any]) -> ParsedRequest:
    prompt = body.get("prompt")
    if prompt is not None and not isinstance(prompt, str):
        raise wrong_type("prompt", "a string", prompt)
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        raise wrong_type("system", "a string", system)
    raw = body.get("raw", False)
    if not isinstance(raw, bool):
        raise wrong_type("raw", "true or false", raw)
    if raw and (system or body.get("template") or body.get("context")):
        raise BadRequest("raw mode does not support template, system, or context")
    return ParsedRequest(
        prompt=prompt or "", system=system, raw=raw, load_only=not prompt, **common
    )


def _refuse_unsupported(body: dict[str, Any], model_name: str, chat: bool) -> None:
    """400 for fields this engine cannot honour, instead of ignoring them silently (Ollama
    answers a model without the capability the same way: "... does not support ...")."""
    if not chat and body.get("images"):
        raise BadRequest(f'"{model_name}" does not support images (field "images")')
    if body.get("format") not in (None, ""):
        raise BadRequest(f'"{model_name}" on the embedded engine does not support '
                         'structured output (field "format"); leave it out')
    if chat and body.get("tools"):
        raise BadRequest(f'"{model_name}" does not support tools (field "tools")')


def _parse_messages(messages: Any, model_name: str) -> list[dict[str, str]]:
    if not isinstance(messages, list):
        raise wrong_type("messages", 'a list of {"role", "content"} objects', messages)
    parsed = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise wrong_type(f"messages[{i}]", "an object with role and content", msg)
        role, content = msg.get("role"), msg.get("content", "")
        if role not in ROLES:
            raise BadRequest(f"messages[{i}].role must be one of {', '.join(ROLES)}, got {role!r}")
        if not isinstance(content, str):
            raise wrong_type(f"messages[{i}].content", "a string", content)
        if msg.get("images"):
            raise BadRequest(f'"{model_name}" does not support images (messages[{i}].images)')
        parsed.append({"role": role, "content": content})
    return parsed
