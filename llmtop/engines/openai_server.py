"""Which OpenAI-compatible server answers, and what its model listing says.

`identify` asks the server's root for the routes only one kind of server has (docs/protocols.md,
"OpenAI-compatible servers"), all at once, each once and with a short timeout, and reads
their answers in this order (the first that matches decides):

| route                        | answer                                       | kind              |
|------------------------------|----------------------------------------------|-------------------|
| GET /api/version             | `{"version": …}`                             | Ollama (its /v1)  |
| GET /props                   | `{"build_info": …}`                          | llama-server      |
| GET /version                 | `{"version": …}`                             | vLLM              |
| GET /openapi.json            | `info.title` naming "llama.cpp Python"        | llama-cpp-python  |
| GET /api/v0/models           | a model list                                 | LM Studio         |

Anything else is "OpenAI-compatible" (kind unknown). `openai_models` is the quick check
`--engine auto` makes at `GET {base}/models`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from llmtop.engines.base import ModelInfo
from llmtop.engines.hosts import proxy_for

PROBE_TIMEOUT_S = 0.5  # a local server answers these in milliseconds
IDENTITY_ROUTES = ("/api/version", "/props", "/version", "/openapi.json", "/api/v0/models")


@dataclass(frozen=True, slots=True)
class ServerKind:
    """What answers: `kind` ("ollama", "llama-server", "vllm", "llama-cpp-python",
    "lm-studio" or "openai-compatible") and the version it gave (None when none)."""

    kind: str
    version: str | None = None

    def describe(self) -> str:
        """"llama-server b6500-0c1e570", or the kind alone."""
        return f"{self.kind} {self.version}" if self.version else self.kind


def server_root(url: str) -> str:
    """scheme://host:port of a URL, without its path."""
    parsed = httpx.URL(url)
    port = f":{parsed.port}" if parsed.port else ""
    host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
    return f"{parsed.scheme}://{host}{port}"


async def get_json(client: httpx.AsyncClient, url: str,
                   timeout_s: float = PROBE_TIMEOUT_S) -> Any:
    """The JSON body of a GET of `url` (a server's self-description: /props, /slots,
    /v1/models...), or None for any other status, a transport error, a timeout of
    `timeout_s` seconds or a body that is not JSON. Never raises."""
    try:
        resp = await client.get(url, timeout=timeout_s)
        return resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


async def identify(client: httpx.AsyncClient, base: str,
                   known: Mapping[str, Any] | None = None) -> ServerKind:
    """The kind of server at `base` (an API base URL), by the routes in the module table,
    asked together (a server that answers none costs one timeout, not five in a row).
    known: answers already read (route → JSON, None for none), not asked again: `connect`'s
    look has asked `/api/version`. Never raises: a server that answers none of them is
    "openai-compatible"."""
    root = server_root(base)
    answers = dict(known or {})
    todo = [route for route in IDENTITY_ROUTES if route not in answers]
    answers.update(zip(todo, await asyncio.gather(
        *(get_json(client, f"{root}{route}") for route in todo)), strict=True))
    found = answers["/api/version"]
    if isinstance(found, dict) and "version" in found:
        return ServerKind("ollama", str(found["version"]))
    found = answers["/props"]
    if isinstance(found, dict) and "build_info" in found:
        return ServerKind("llama-server", str(found["build_info"]))
    found = answers["/version"]
    if isinstance(found, dict) and "version" in found:
        return ServerKind("vllm", str(found["version"]))
    found = answers["/openapi.json"]
    info = found.get("info") if isinstance(found, dict) else None
    if isinstance(info, dict) and "llama.cpp python" in str(info.get("title", "")).lower():
        return ServerKind("llama-cpp-python", str(info.get("version") or "") or None)
    found = answers["/api/v0/models"]
    if isinstance(found, dict) and isinstance(found.get("data"), list):
        return ServerKind("lm-studio")
    return ServerKind("openai-compatible")


async def openai_models(base: str, api_key: str | None = None,
                        timeout_s: float = PROBE_TIMEOUT_S) -> list[str] | None:
    """The model ids an OpenAI-compatible server at `base` lists at `GET {base}/models`, or
    None when nothing answers with such a list within `timeout_s` seconds. Never raises."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with httpx.AsyncClient(timeout=timeout_s, trust_env=False, headers=headers,
                                     proxy=proxy_for(base)) as client:
            resp = await client.get(f"{base}/models")
            data = resp.json().get("data") if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    if not isinstance(data, list):
        return None
    return [str(m["id"]) for m in data if isinstance(m, dict) and m.get("id")]


def model_details(entry: dict[str, Any]) -> ModelInfo:
    """A `{base}/models` entry as ModelInfo: llama-server's `meta` (`n_ctx`, `size` in bytes,
    `n_params`, `ftype`), vLLM's `max_model_len`; what is not there stays None."""
    raw_meta = entry.get("meta")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    context = meta.get("n_ctx", entry.get("max_model_len"))
    params = meta.get("n_params")
    return ModelInfo(
        name=str(entry["id"]),
        parameter_size=f"{params / 1e6:.2f}M" if isinstance(params, int) else None,
        quantization=str(meta["ftype"]) if meta.get("ftype") else None,
        format="gguf" if meta else None,
        size=meta.get("size") if isinstance(meta.get("size"), int) else None,
        weights_bytes=meta.get("size") if isinstance(meta.get("size"), int) else None,
        context_length=context if isinstance(context, int) else None,
        model_info={k: v for k, v in entry.items() if k != "id"},
    )
