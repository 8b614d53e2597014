"""llmtop's generation options (Ollama's `options` names) as an OpenAI chat request body.

| Ollama option   | OpenAI field   |
|-----------------|----------------|
| num_predict     | max_tokens (the field every local server takes; `max_completion_tokens` is newer
and llama-cpp-python ignores it) |
| temperature     | temperature    |
| seed            | seed           |
| top_p           | top_p          |
| stop            | stop           |

Everything else has no OpenAI field: `num_ctx` (the server's own context applies: set it when
starting the server, e.g. `llama-server -c`, `--n_ctx`, vLLM `--max-model-len`), other
sampling knobs, `think` and `keep_alive`. They are not sent, and `request_body` says so in
its list of notes rather than dropping them silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

OPTION_FIELDS = {"num_predict": "max_tokens", "temperature": "temperature", "seed": "seed",
                 "top_p": "top_p", "stop": "stop"}
WHY_UNSENT = {
    "num_ctx": "the OpenAI API has no context-size field: the server's own context applies "
               "(set it when starting the server)",
    "num_thread": "the OpenAI API has no thread-count field: the server's own threads apply "
                  "(set them when starting the server)",
}


def request_body(
    model: str,
    messages: list[Mapping[str, Any]],
    options: Mapping[str, Any] | None,
    *,
    think: bool | str | None = None,
    keep_alive: float | str | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The streamed chat body for `model`, and one note per option that was not sent.

    options: Ollama names (see the module's table); a None value is not sent and not noted.
    Returns ({"model", "messages", "stream": True, mapped fields…}, ["num_ctx not sent: …"]).
    """
    body: dict[str, Any] = {"model": model, "messages": [dict(m) for m in messages],
                            "stream": True}
    notes = []
    for name, value in (options or {}).items():
        if value is None:
            continue
        if name in OPTION_FIELDS:
            body[OPTION_FIELDS[name]] = value
        else:
            why = WHY_UNSENT.get(name, "the OpenAI API has no such field")
            notes.append(f"option {name}={value!r} not sent: {why}")
    if think is not None:
        notes.append(f"think={think!r} not sent: the OpenAI API has no portable switch for "
                     "thinking (the server's default applies)")
    if keep_alive is not None:
        notes.append(f"keep_alive={keep_alive!r} not sent: the server keeps its model loaded "
                     "by its own rules")
    return body, notes
