"""A modal that shows a bench's full markdown report (`llmtop.sessions.reports.run_markdown`),
scrollable."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown, Static

from llmtop.tui.state.report_layout import terminal_markdown


class ReportScreen(ModalScreen[None]):
    """The report as rendered Markdown, its wide tables laid out for the terminal
    (`terminal_markdown`); arrows/PgUp/PgDn scroll, Esc / q / r close."""

    CSS_PATH = "../report.tcss"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,r", "dismiss", "Close report"),
    ]

    def __init__(self, markdown: str, log_path: str, title: str = "bench report",
                 command: str | None = None) -> None:
        super().__init__()
        self.markdown = markdown
        self.log_path = log_path
        self.title_text = title
        self.command = command or f"llmtop report {log_path}"  # the same, from a shell

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="report-box") as box:
            box.border_title = self.title_text
            box.border_subtitle = "Esc closes"
            # wide tables as one bullet per row: no cell squeezed over 4–6 lines
            yield Markdown(terminal_markdown(self.markdown), id="report-md")
            yield Static(f"from {self.log_path} ({self.command})", classes="dim")

    def on_mount(self) -> None:
        self.query_one("#report-box", VerticalScroll).focus()
