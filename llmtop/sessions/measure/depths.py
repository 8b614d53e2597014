"""A context-depth sweep's plan (`llmtop bench --depths`): the depths asked for, and the
engine's context that must hold them (docs/guide/context.md, "Context depth").

A depth is N tokens of context before the answer: each request of depth N is a fresh,
cache-busted prompt the server counts at about N tokens (calibrated as the bench's prompt
sizes are), so its prefill reads all N and its decode runs after them — llama-bench's
`-d N` as an HTTP client sees it. Depths are plain token counts, as llama-bench's `-d`
takes them; a `k` suffix multiplies by 1024 (`4k` = 4096), because contexts are sized in
powers of two (`-c 8192`, `num_ctx 4096`) and a depth named "8k" is meant to fill one.

Pure: no I/O (the CLI parses its flags with it before importing the runners).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

KIBI = 1024  # "1k": contexts are sized in powers of two (the module's doc)
MIN_DEPTH = 8  # the smallest calibrated prompt size (commands/flags.parse_sizes' floor)
# The largest depth believed: llama.cpp keeps n_ctx in a uint32_t, but no model trains past
# 10M tokens; a typo such as "10000k" is refused rather than calibrated for minutes.
MAX_DEPTH = 10_000_000
_DEPTH = re.compile(r"(\d+(?:\.\d+)?)([kK]?)")


def parse_depths(text: str) -> tuple[int, ...]:
    """"1k,4k,16k" → (1024, 4096, 16384); "256,1000" → (256, 1000). A `k` multiplies by
    1024; "1.5k" is 1536 (a fraction must give a whole number of tokens). Raises
    argparse.ArgumentTypeError naming the bad part: not a count, under MIN_DEPTH, over
    MAX_DEPTH, or given twice."""
    depths: list[int] = []
    for raw in text.split(","):
        part = raw.strip()
        match = _DEPTH.fullmatch(part)
        if match is None:
            raise argparse.ArgumentTypeError(
                f"depth {part!r} is not a token count: give whole tokens (256) or k for 1024 "
                "tokens (4k = 4096), comma-separated")
        number, k = float(match.group(1)), match.group(2)
        tokens = number * KIBI if k else number
        if tokens != int(tokens):
            raise argparse.ArgumentTypeError(f"depth {part!r} is {tokens:g} tokens, not a whole "
                                             "number")
        if not MIN_DEPTH <= tokens <= MAX_DEPTH:
            raise argparse.ArgumentTypeError(
                f"depth {part!r} ({int(tokens)} tokens) is outside {MIN_DEPTH}–{MAX_DEPTH:,}")
        if int(tokens) in depths:
            raise argparse.ArgumentTypeError(f"depth {part!r} ({int(tokens)} tokens) is given "
                                             "twice")
        depths.append(int(tokens))
    return tuple(depths)


def depth_label(tokens: int) -> str:
    """A depth as a user names it: "4k" for a multiple of 1024, else the count ("1000")."""
    return f"{tokens // KIBI}k" if tokens % KIBI == 0 else str(tokens)


@dataclass(frozen=True, slots=True)
class ContextLimit:
    """The most tokens one request may hold on this engine (prompt and output together).

    tokens: the limit; source: where it was read ("llama-server's /props n_ctx (per slot)",
    "--num-ctx", "the model's training context (gemma3.context_length)"); remedy: how to
    raise it (the flag, on llmtop's command line or the engine's)."""

    tokens: int
    source: str
    remedy: str


def training_context(model_info: Mapping[str, Any]) -> tuple[int, str] | None:
    """The model's training context from Ollama's `/api/show` model_info (the GGUF's
    `<arch>.context_length`), with its key; None when absent or not a positive count."""
    for key, value in model_info.items():
        if key.endswith(".context_length") and isinstance(value, int) and value > 0:
            return value, key
    return None


def context_limit(engine: str, engine_config: Mapping[str, Any] | None,
                  model_context: int | None, model_info: Mapping[str, Any],
                  num_ctx: int) -> ContextLimit | None:
    """The context a request of this bench may fill, from what the engine said.

    An OpenAI-API server fixes its context when it starts (no request field sets it):
    llama-server's `/props` n_ctx of one slot (`engine_config["n_ctx_per_slot"]`), else the
    model entry's context (`model_context`: llama-server's meta n_ctx, vLLM's max_model_len).
    Ollama and the embedded engine take `num_ctx` with each request (llmtop's --num-ctx) and
    cap it at the model's training context (`training_context(model_info)`), so the limit
    is the smaller. None when an OpenAI-API server says nothing of its context: the depths
    are sent as asked, and a prompt too long comes back as the server's own error.
    engine: the Engine's name ("ollama", "embedded", "openai")."""
    cfg = engine_config or {}
    if engine not in ("ollama", "embedded"):
        per_slot = cfg.get("n_ctx_per_slot")
        if isinstance(per_slot, int) and per_slot > 0:
            return ContextLimit(per_slot, "llama-server's /props n_ctx (one slot's context)",
                                "start llama-server with a larger -c/--ctx-size (each of its "
                                "--parallel slots gets -c ÷ --parallel)")
        if isinstance(model_context, int) and model_context > 0:
            return ContextLimit(model_context, "the server's /models context (n_ctx or "
                                "max_model_len)", "restart the server with a larger context "
                                "(llama-server -c, vLLM --max-model-len)")
        return None
    trained = training_context(model_info)
    if trained is not None and trained[0] < num_ctx:
        return ContextLimit(trained[0], f"the model's training context ({trained[1]})",
                            "use smaller depths: --num-ctx cannot go past the model's "
                            "training context")
    room = f" (up to the model's training context, {trained[0]:,})" if trained else ""
    return ContextLimit(num_ctx, "--num-ctx", f"raise --num-ctx{room}")


def depth_refusal(depths: Sequence[int], max_tokens: int, limit: ContextLimit) -> str | None:
    """Why the deepest depth cannot run within `limit`, or None when every depth fits.
    A depth needs room for its own output after it (depth + max_tokens), as llama-bench's
    `-d N -n M` needs N + M of n_ctx: decode at depth N writes its tokens past the N."""
    deepest = max(depths)
    if deepest + max_tokens <= limit.tokens:
        return None
    return (f"depth {depth_label(deepest)} ({deepest:,} tokens) plus --max-tokens {max_tokens} "
            f"needs {deepest + max_tokens:,} tokens of context; this engine's limit is "
            f"{limit.tokens:,} ({limit.source}): {limit.remedy}, or ask for depths up to "
            f"{limit.tokens - max_tokens:,}")
