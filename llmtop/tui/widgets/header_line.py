"""The one-line header: engine · host · model · quantization · size, and the session log path."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len, set_cell_size
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Static

from llmtop.safetext import one_line
from llmtop.tui.widgets.path_label import PathLabel

if TYPE_CHECKING:
    from llmtop.engines.connection import Connection

SEP = " · "
LOG_ROOM = 13  # the log path keeps at least "log …s.jsonl" (11 cells) and its 2 of padding


def model_label(model: str) -> str:
    """The model as the header names it: a file path (llama-server and llama-cpp-python list
    the GGUF's path as the model's id: "/root/.cache/llmtop/models/gemma-3-270m-q4_k_m.gguf")
    by its base name, "gemma-3-270m-q4_k_m.gguf"; any other name as it is ("qwen3:8b",
    "hf.co/unsloth/Qwen3-8B-GGUF:Q4_K_M", "Qwen/Qwen2.5-0.5B-Instruct" are names, not paths)."""
    looks_like_path = model.startswith(("/", "~", "./", "../")) or (
        len(model) > 2 and model[1:3] in (":\\", ":/")) or model.lower().endswith(".gguf")
    if not looks_like_path:
        return model
    base = model.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    return base or model


def llama_server_parts(config: Mapping[str, Any]) -> list[tuple[int, str]] | None:
    """llama-server's configuration as header parts, each with its rank (`identity_parts`):
    "4 slots × 1024 ctx" (2), "2 threads" (3), "flash-attn auto · KV f16" (4), from its
    /props and, for the threads, flash-attn and KV type, its command line; llama-server's own
    default named "(default)" where the command line was read but lacks the flag; nothing for a
    figure neither says. None for another engine."""
    if config.get("server") != "llama-server":
        return None
    parts: list[tuple[int, str]] = []
    slots, ctx = config.get("total_slots"), config.get("n_ctx_per_slot")
    if slots is not None:
        parts.append((2, f"{slots} slot{'s' if slots != 1 else ''}"
                      + (f" × {ctx} ctx" if ctx is not None else "")))
    flags = config.get("flags")
    if isinstance(flags, Mapping) and not str(flags.get("source", "")).startswith("not read"):
        threads = flags.get("threads")
        parts.append((3, f"{threads} threads" if threads else "threads (default)"))
        k, v = flags.get("cache_type_k", "f16"), flags.get("cache_type_v", "f16")
        kv = k if k == v else f"{k}/{v}"
        parts.append((4, f"flash-attn {flags.get('flash_attn', 'auto')} · KV {kv}"))
    return parts


def identity_parts(conn: Connection) -> list[tuple[int, str]]:
    """The identity's parts in display order, each with its rank: when the line is too narrow
    the highest rank goes first (the version, then the host, the engine's configuration, the
    size, the quantization); the engine, the model (by its base name when it is a path:
    `model_label`) and "base model" always stay."""
    info = conn.info
    parts = [(0, conn.engine.name), (5, conn.engine.host), (0, model_label(conn.model))]
    if info is not None:
        parts += [(rank, p) for rank, p in ((2, info.quantization), (3, info.parameter_size)) if p]
        if info.chat_template is False:  # it continues text rather than answering
            parts.append((0, "base model"))
    if conn.version:  # "v0.9.0"; an OpenAI server's "llama-server b6500" as it is
        version = conn.version
        parts.append((6, f"v{version}" if version[:1].isdigit() else version))
    server = llama_server_parts(conn.engine_config or {})
    if server is not None:  # llama-server: its slots, threads, flash-attn and KV type
        parts += server
    elif conn.engine_config_short:  # the embedded engine: how llama.cpp runs on this CPU
        parts.append((4, conn.engine_config_short))
    return [(rank, one_line(text, 400)) for rank, text in parts]


def fit_parts(parts: list[tuple[int, str]], width: int) -> str:
    """The parts joined by " · " in at most `width` cells: whole parts are dropped, highest
    rank first, until the line fits; if the parts that always stay are still too wide, the
    line is cut with "…" (a part is never cut mid-word otherwise)."""
    kept = list(parts)
    while cell_len(SEP.join(t for _, t in kept)) > width and any(r for r, _ in kept):
        drop = max(range(len(kept)), key=lambda i: (kept[i][0], i))
        del kept[drop]
    line = SEP.join(t for _, t in kept)
    if cell_len(line) <= width:
        return line
    return set_cell_size(line, max(width - 1, 0)) + "…" if width > 0 else ""


def identity(conn: Connection) -> str:
    """e.g. "embedded · http://127.0.0.1:41234 · gemma3:270m · Q4_K_M · 268.10M"."""
    return SEP.join(text for _, text in identity_parts(conn))


class HeaderLine(Horizontal):
    """Engine identity on the left, the session log path on the right (1 row)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._parts: list[tuple[int, str]] | None = None  # the connection's, once connected

    def compose(self) -> ComposeResult:
        yield Static(Text("llmtop · starting engine…", style="bold"), id="hdr-engine")
        yield PathLabel("log ", id="hdr-log")

    def show_starting(self, engine: str) -> None:
        """While `connect()` runs (the embedded engine takes a few seconds to start)."""
        self.query_one("#hdr-engine", Static).update(
            Text(f"llmtop · starting engine… ({engine})", style="bold")
        )

    def show_connection(self, conn: Connection) -> None:
        """The connected engine's identity, as much of it as the width holds (`fit_parts`)."""
        self._parts = [(0, "llmtop"), *identity_parts(conn)]
        self._draw_identity()

    def _draw_identity(self) -> None:
        if self._parts is None or not self.content_size.width:
            return
        room = self.content_size.width - LOG_ROOM
        self.query_one("#hdr-engine", Static).update(
            Text(fit_parts(self._parts, room), style="bold")
        )

    def on_resize(self) -> None:
        self._draw_identity()

    def show_log(self, path: str) -> None:
        """The session log path (where every request and probe sample is recorded)."""
        self.query_one(PathLabel).set_path(path)

    def show_failed(self, what: str) -> None:
        """Connecting failed; the token pane has the details."""
        self._parts = None  # a resize keeps this line
        self.query_one("#hdr-engine", Static).update(Text(f"llmtop · {what}", style="bold red"))
