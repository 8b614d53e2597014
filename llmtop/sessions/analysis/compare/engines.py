"""What two runs' engines served and how they were set up, as far as their logs' headers
record it: is it the same model, and do the engine configurations differ?

The same GGUF served by two engines goes by two names (the embedded engine's "gemma3:270m",
llama-server's file name), so a model is identified by what the file is, where both logs
record it: its digest, its parameter count (`model_details.parameter_size`), its quantization
and, from llama-server's `/props`, its file name; its size only between two logs of one
engine (Ollama's `/api/ps` size is the memory the model takes, llama-server's `meta.size` its
tensors' bytes, the embedded engine's the file's: three different figures for one file).

An engine's configuration changes its speed as much as the engine does (measured on 2 cores:
one thread against two made a run "5.82× slower"; at equal threads the two engines were 3 to
7 % apart), so `config_differences` names each recorded setting that differs: threads (the
requests' `num_thread` where the engine takes it, else the engine's own), batch sizes,
context per slot, slots, flash attention, KV cache types, repacking, a draft model, the share
of the model in GPU memory. A setting only one log records is not compared: absent is not a
difference.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from llmtop.sessions.records.schema import Header

# "268.10M", "8.0B", "1.5K", "270M": Ollama's and llmtop's parameter sizes
_PARAMS = re.compile(r"^\s*(\d+(?:\.(\d+))?)\s*([KMBT]?)\s*$", re.IGNORECASE)
_SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
SETTING_LABELS = {
    "threads": "threads", "threads_batch": "batch threads", "batch_size": "batch size",
    "ubatch_size": "micro-batch size", "ctx_per_slot": "context per slot", "slots": "slots",
    "flash_attn": "flash attention", "cache_type_k": "KV cache K type",
    "cache_type_v": "KV cache V type", "repack": "repack", "draft_model": "draft model",
    "gpu_share": "model in GPU memory",
}
_FLAG_SETTINGS = ("threads", "threads_batch", "batch_size", "ubatch_size", "flash_attn",
                  "cache_type_k", "cache_type_v")


def parameter_count(text: Any) -> tuple[float, float] | None:
    """A parameter size as (count, resolution): "268.10M" → (268.1e6, 1e4), "8.0B" →
    (8e9, 1e8); None for anything else. The resolution is one unit of the last digit
    written, so two spellings of one count ("8.0B", "8030.26M") agree within half of the
    coarser one."""
    match = _PARAMS.match(text) if isinstance(text, str) else None
    if match is None:
        return None
    scale = _SCALE[match.group(3).upper()]
    decimals = len(match.group(2) or "")
    return float(match.group(1)) * scale, scale / 10**decimals


_SIZES = {"SMALL": "S", "MEDIUM": "M", "LARGE": "L"}


def quantization_name(text: str) -> str:
    """A quantization by Ollama's name for it, upper case: llama.cpp's file-type names
    (llama-server's `/props`: "Q4_K - Medium", "IQ2_XS - 2.3125 bpw") and Ollama's
    ("Q4_K_M", "IQ2_XS") name one file type two ways, so one GGUF served by both would read
    as two models. "Q4_K - Medium" → "Q4_K_M"; "IQ2_XS - 2.3125 bpw" → "IQ2_XS"; any other
    name upper-cased as it is."""
    name, sep, size = text.strip().upper().partition(" - ")
    if not sep:
        return name
    return f"{name}_{_SIZES[size]}" if size in _SIZES else name


def model_identity(h: Header) -> dict[str, Any]:
    """What a header records of the model file, by engine-neutral keys: "digest", "params"
    ((count, resolution, as written): `parameter_count`), "quantization" (upper case), "file" (the
    GGUF's file name, llama-server's `model_path`), "size" (bytes; compared only between
    logs of one engine). Keys with nothing recorded are left out."""
    details = h.model_details if isinstance(h.model_details, Mapping) else {}
    config = h.engine_config if isinstance(h.engine_config, Mapping) else {}
    out: dict[str, Any] = {}
    if isinstance(details.get("digest"), str) and details["digest"]:
        out["digest"] = details["digest"]
    if (params := parameter_count(details.get("parameter_size"))) is not None:
        out["params"] = (*params, details["parameter_size"].strip())
    if isinstance(details.get("quantization"), str) and details["quantization"]:
        out["quantization"] = quantization_name(details["quantization"])
    if isinstance(config.get("model_path"), str) and config["model_path"]:
        out["file"] = os.path.basename(config["model_path"].replace("\\", "/"))
    if isinstance(details.get("size"), int) and details["size"] > 0:
        out["size"] = details["size"]
    return out


def _same(key: str, a: Any, b: Any) -> bool:
    if key == "params":
        return bool(abs(a[0] - b[0]) <= max(a[1], b[1]) / 2)
    return bool(a == b)


def _shown(key: str, value: Any) -> str:
    return str(value[2]) if key == "params" else str(value)


_IDENTITY_LABELS = {"digest": "digest", "params": "parameters", "quantization": "quantization",
                    "file": "file", "size": "size"}


def model_warning(a: Header, b: Header) -> str | None:
    """What to say of the two runs' models (None: nothing): "models differ: …" when a field
    both record differs (the digest alone, under one name: "model digests differ: …: another
    build of it"); under two names with nothing that differs, the fields that identify it as
    one model and those only one log records; under two names with nothing to compare,
    that the names differ and nothing tells whether the file is the same."""
    ia, ib = model_identity(a), model_identity(b)
    if a.engine != b.engine:
        ia.pop("size", None)
        ib.pop("size", None)
    shared = [k for k in ia if k in ib]
    differ = [k for k in shared if not _same(k, ia[k], ib[k])]
    if a.model == b.model and differ == ["digest"]:
        return f"model digests differ: A {ia['digest']}, B {ib['digest']}: another build of it"
    if differ:
        what = "; ".join(f"{_IDENTITY_LABELS[k]} A {_shown(k, ia[k])}, B {_shown(k, ib[k])}"
                         for k in differ)
        return f"models differ: A {a.model}, B {b.model} ({what})"
    if a.model == b.model:
        return None
    if not shared:
        return (f"model names differ: A {a.model}, B {b.model}, and neither log records what "
                "would tell whether the file is the same (digest, parameters, quantization)")
    same = ", ".join(f"{_IDENTITY_LABELS[k]} {_shown(k, ia[k])}" for k in shared)
    unsaid = [_IDENTITY_LABELS[k] for k in ("digest", "quantization") if k not in shared]
    tail = f"; not in both logs: {', '.join(unsaid)}" if unsaid and "digest" not in shared else ""
    return (f"the engines name the model differently (A {a.model}, B {b.model}); the same "
            f"model by its {same}{tail}")


def _is_openai(h: Header) -> bool:
    """The engine took requests over the OpenAI API (which has no thread-count field)."""
    config = h.engine_config if isinstance(h.engine_config, Mapping) else {}
    return config.get("server") == "llama-server" or str(h.engine or "").startswith("openai")


def engine_settings(h: Header) -> dict[str, str]:
    """The engine configuration a header records, by engine-neutral keys (SETTING_LABELS),
    values as text; a setting not recorded is left out. threads: the requests' num_thread
    where the engine takes it (Ollama's API), else the embedded engine's default or
    llama-server's `--threads` ("default" when its command line was read without it)."""
    config = h.engine_config if isinstance(h.engine_config, Mapping) else {}
    options = h.options if isinstance(h.options, Mapping) else {}
    out: dict[str, str] = {}
    flags = config.get("flags")
    if not isinstance(flags, Mapping) or str(flags.get("source", "")).startswith("not read"):
        flags = None
    if config.get("server") == "llama-server":
        for key in _FLAG_SETTINGS:
            if flags is not None:
                out[key] = str(flags.get(key, "default"))
        if flags is not None:
            out["repack"] = "on" if flags.get("repack", True) else "off"
        for key, name in (("n_ctx_per_slot", "ctx_per_slot"), ("total_slots", "slots")):
            if config.get(key) is not None:
                out[name] = str(config[key])
        if isinstance(config.get("speculative"), bool):
            out["draft_model"] = "yes" if config["speculative"] else "no"
    elif "use_extra_bufts" in config:  # the embedded engine's llama.cpp configuration
        out["repack"] = "on" if config["use_extra_bufts"] else "off"
        if isinstance(config.get("threads"), int):
            out["threads"] = str(config["threads"])
    wanted = options.get("num_thread")
    if isinstance(wanted, int) and not isinstance(wanted, bool) and not _is_openai(h):
        out["threads"] = str(wanted)
    details = h.model_details if isinstance(h.model_details, Mapping) else {}
    vram, size = details.get("size_vram"), details.get("size")
    if isinstance(vram, int) and isinstance(size, int) and size > 0:
        out["gpu_share"] = f"{round(10 * vram / size) * 10} %"  # to 10 %: a fit, not a reading
    return out


def config_differences(a: Header, b: Header) -> list[str]:
    """Each recorded setting whose value differs between the two runs' engines: ["threads A
    1, B 2", …] in SETTING_LABELS order; [] when none (or none is recorded by both)."""
    sa, sb = engine_settings(a), engine_settings(b)
    return [f"{label} A {sa[k]}, B {sb[k]}" for k, label in SETTING_LABELS.items()
            if k in sa and k in sb and sa[k] != sb[k]]
