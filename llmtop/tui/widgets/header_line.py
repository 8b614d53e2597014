"""The one-line header: engine · host · model · quantization · size, and the session log path."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Static

from llmtop.engines.connection import Connection
from llmtop.safetext import one_line
from llmtop.tui.widgets.path_label import PathLabel


def identity(conn: Connection) -> str:
    """e.g. "embedded · http://127.0.0.1:41234 · gemma3:270m · Q4_K_M · 268.10M"."""
    info = conn.info
    parts = [conn.engine.name, conn.engine.host, conn.model]
    if info is not None:
        parts += [p for p in (info.quantization, info.parameter_size) if p]
        if info.chat_template is False:  # it continues text rather than answering
            parts.append("base model")
    if conn.version:
        parts.append(f"v{conn.version}")
    if conn.engine_config_short:  # the embedded engine: how llama.cpp runs on this CPU
        parts.append(conn.engine_config_short)
    return one_line(" · ".join(parts), 400)


class HeaderLine(Horizontal):
    """Engine identity on the left, the session log path on the right (1 row)."""

    def compose(self) -> ComposeResult:
        yield Static(Text("llmtop · starting engine…", style="bold"), id="hdr-engine")
        yield PathLabel("log ", id="hdr-log")

    def show_starting(self, engine: str) -> None:
        """While `connect()` runs (the embedded engine takes a few seconds to start)."""
        self.query_one("#hdr-engine", Static).update(
            Text(f"llmtop · starting engine… ({engine})", style="bold")
        )

    def show_connection(self, conn: Connection) -> None:
        """The connected engine's identity."""
        self.query_one("#hdr-engine", Static).update(
            Text(f"llmtop · {identity(conn)}", style="bold")
        )

    def show_log(self, path: str) -> None:
        """The session log path (where every request and probe sample is recorded)."""
        self.query_one(PathLabel).set_path(path)

    def show_failed(self, what: str) -> None:
        """Connecting failed; the token pane has the details."""
        self.query_one("#hdr-engine", Static).update(Text(f"llmtop · {what}", style="bold red"))
