"""What the engine panel (F4) shows, from a reading of the engine's own figures
(`engines.live_state.EngineState`): pure, without Textual.

llama-server: its requests (processing, deferred), KV use, tokens per second, one line per
slot (MAX_SLOT_LINES at most); vLLM: running, waiting, KV use, prefix-cache hits, tokens per
second; Ollama and the embedded engine: one line per loaded model as `ollama ps` prints it,
with the keep-alive counting down. Then the engine's decode rate against llmtop's measured
one (`live_state.disagreement`), and the other engines that answer (the picker, F5).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from rich.text import Text

if TYPE_CHECKING:
    from llmtop.engines.discovery import FoundEngine
    from llmtop.engines.live_state import EngineState, LoadedModel, SlotState

MAX_SLOT_LINES = 8  # more slots are summed in one line: the panel stays a few lines tall
GB = 1e9  # `ollama ps` prints decimal GB


def _count(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def _bar(pct: float, width: int = 10) -> str:
    filled = min(width, max(0, round(pct * width / 100)))
    return "█" * filled + "·" * (width - filled)


def kv_text(state: EngineState) -> str:
    """"KV ███·······  27.5 % (/slots: …)" or "KV n/a" (absent is not zero)."""
    if state.kv_pct is None:
        return "KV n/a"
    return f"KV {_bar(state.kv_pct)} {state.kv_pct:5.1f} %"


def slot_line(slot: SlotState) -> str:
    """"slot 0 busy   412/1024 tok, 96 decoded" / "slot 1 idle        –/1024"."""
    ctx = "?" if slot.n_ctx is None else str(slot.n_ctx)
    if not slot.processing:
        word = "idle" if slot.processing is False else "?"
        return f"slot {slot.id:<2} {word:<5} {'–':>6}/{ctx}"
    tokens = "?" if slot.tokens is None else str(slot.tokens)
    decoded = "" if slot.decoded is None else f", {slot.decoded} decoded"
    return f"slot {slot.id:<2} busy  {tokens:>6}/{ctx} tok{decoded}"


def model_line(model: LoadedModel, now: datetime) -> str:
    """One `/api/ps` model as `ollama ps` prints it: "gemma3:270m  0.3 GB  100% CPU
    ctx 4096  unloads in 4:32" ("expired" when overdue; "kept loaded" when the expiry is
    years away: keep_alive -1)."""
    size = "size ?" if model.size is None else f"{model.size / GB:.1f} GB"
    words = [model.name, size, model.processor()]
    if model.context is not None:
        words.append(f"ctx {model.context}")
    left = model.expires_in_s(now)
    if left is not None:
        if left <= 0:
            words.append("expired")
        elif left > 365 * 86400:
            words.append("kept loaded")
        else:
            minutes, seconds = divmod(int(left), 60)
            hours, minutes = divmod(minutes, 60)
            words.append(f"unloads in {hours}:{minutes:02d}:{seconds:02d}" if hours else
                         f"unloads in {minutes}:{seconds:02d}")
    return "  ".join(words)


def head_line(state: EngineState) -> str:
    """The queue and rates: "2 processing · 0 deferred · KV ███ 12.0 % · 61.9 tok/s"."""
    queued = "deferred" if state.kind == "llama-server" else "waiting"
    running = "processing" if state.kind == "llama-server" else "running"
    words = [f"{_count(state.processing)} {running}", f"{_count(state.waiting)} {queued}",
             kv_text(state)]
    if state.tokens_per_s is not None:
        words.append(f"{state.tokens_per_s:.1f} tok/s")
    if state.prefix_hit_pct is not None:
        words.append(f"prefix hits {state.prefix_hit_pct:.0f} %")
    return " · ".join(words)


def state_lines(state: EngineState, now: datetime) -> list[str]:
    """The reading's lines (head, slots or models, then its notes)."""
    if state.kind == "ollama":
        if state.models is None:
            lines = ["/api/ps: no answer"]
        elif not state.models:
            lines = ["no model loaded (/api/ps)"]
        else:
            lines = [model_line(m, now) for m in state.models]
    else:
        lines = [head_line(state)]
        slots = state.slots or ()
        lines += [slot_line(s) for s in slots[:MAX_SLOT_LINES]]
        if len(slots) > MAX_SLOT_LINES:
            rest = slots[MAX_SLOT_LINES:]
            lines.append(f"+{len(rest)} slots: {sum(1 for s in rest if s.processing)} busy")
        if state.kv_source:
            lines.append(f"KV from {state.kv_source}")
    return lines + [f"note: {n}" for n in state.notes]


def others_text(others: Sequence[FoundEngine]) -> str | None:
    """"also answering: llama-server at http://127.0.0.1:8080 — F5 picks" (None: none)."""
    if not others:
        return None
    named = ", ".join(f"{e.kind} at {e.url}" for e in others[:3])
    more = f" (+{len(others) - 3})" if len(others) > 3 else ""
    return f"also answering: {named}{more} — F5 picks one"


def panel_text(state: EngineState | None, now: datetime, *, client_decode: float | None = None,
               server_decode: float | None = None, others: Sequence[FoundEngine] = (),
               unsupported: str | None = None) -> Text:
    """The whole panel. state: the latest reading (None: none yet); now: the wall clock for
    the keep-alive countdown; client_decode / server_decode: llmtop's measured decode of
    the last request and the engine's own over the request(s) that finished with it
    (tok/s); others: the other engines answering; unsupported: why this engine has no live
    figures (then only that and the others are shown)."""
    from llmtop.engines.live_state import PACE_S, disagreement

    text = Text()
    if unsupported is not None:
        text.append(unsupported, style="dim")
    elif state is None:
        text.append(f"reading the engine's own figures (every {PACE_S:g} s)…", style="dim")
    else:
        text.append("\n".join(state_lines(state, now)))
    if server_decode is not None and client_decode is not None:
        line = disagreement(client_decode, server_decode)
        text.append("\n")
        if line is None:
            text.append(f"decode: engine {server_decode:.1f} tok/s, llmtop {client_decode:.1f}"
                        " — agree", style="dim")
        else:
            text.append(f"⚠ {line}", style="bold yellow")
    others_line = others_text(others)
    if others_line:
        text.append("\n" + others_line, style="cyan")
    return text
