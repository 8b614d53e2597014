"""The one-line header: engine · host · model · quantization · size, and the session log path."""

from __future__ import annotations

from rich.cells import cell_len, set_cell_size
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Static

from llmtop.engines.connection import Connection
from llmtop.safetext import one_line
from llmtop.tui.widgets.path_label import PathLabel

SEP = " · "
LOG_ROOM = 13  # the log path keeps at least "log …s.jsonl" (11 cells) and its 2 of padding


def identity_parts(conn: Connection) -> list[tuple[int, str]]:
    """The identity's parts in display order, each with its rank: when the line is too narrow
    the highest rank goes first (the version, then the host, the engine's configuration, the
    size, the quantization); the engine, the model and "base model" always stay."""
    info = conn.info
    parts = [(0, conn.engine.name), (5, conn.engine.host), (0, conn.model)]
    if info is not None:
        parts += [(rank, p) for rank, p in ((2, info.quantization), (3, info.parameter_size)) if p]
        if info.chat_template is False:  # it continues text rather than answering
            parts.append((0, "base model"))
    if conn.version:
        parts.append((6, f"v{conn.version}"))
    if conn.engine_config_short:  # the embedded engine: how llama.cpp runs on this CPU
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
