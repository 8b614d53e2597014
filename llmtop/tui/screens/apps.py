"""The apps screen (F3): every app of the latest probe sample, and the processes of the one
under the cursor — pid, program (as the probe names it: never an argument), user, threads,
start time — read when the cursor reaches it. `r` takes the newest sample; Esc, q or F3
closes. Content: `tui.state.apps_detail`."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from llmtop.probes.processes import AppUsage, ProcessSample, describe_pids
from llmtop.probes.sampler import ProbeSample
from llmtop.tui.state.apps_detail import APP_COLUMNS, app_rows, detail_text


class AppsScreen(ModalScreen[None]):
    """The sample's apps in a table, the selected one's processes under it."""

    DEFAULT_CSS = """
    AppsScreen { align: center middle; }
    #apps-box { width: 90%; height: 90%; border: round $primary; padding: 0 1; }
    #apps-title { height: auto; color: $text-muted; }
    #apps-table { height: 1fr; }
    #apps-detail { height: auto; max-height: 40%; margin-top: 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,f3", "dismiss", "Close"),
        Binding("r", "refresh_sample", "Newest sample"),
    ]

    def __init__(self, sample: ProbeSample | None) -> None:
        super().__init__()
        self.sample = sample
        self.apps: tuple[AppUsage, ...] = ()

    def compose(self) -> ComposeResult:
        with Vertical(id="apps-box"):
            yield Static(id="apps-title")
            table: DataTable[str] = DataTable(id="apps-table", cursor_type="row")
            table.add_columns(*APP_COLUMNS)
            yield table
            yield Static(id="apps-detail")

    def on_mount(self) -> None:
        self.fill()
        self.query_one("#apps-table", DataTable).focus()

    def fill(self) -> None:
        """The table from `self.sample` (nothing yet: says so)."""
        processes: ProcessSample | None = self.sample.processes if self.sample else None
        self.apps = processes.apps if processes else ()
        table = self.query_one("#apps-table", DataTable)
        table.clear()
        for row in app_rows(processes):
            table.add_row(*row)
        when = self.sample.wall_time[11:19] if self.sample else ""
        self.query_one("#apps-title", Static).update(
            f"apps of the probe sample at {when} · ↑/↓ a process list · r newest · Esc closes"
            if self.apps else "no probe sample yet (the probes start with the app)")
        self.show_detail(0)

    def show_detail(self, index: int) -> None:
        """The processes of app `index` (read now; ≤ 20 of them)."""
        detail = self.query_one("#apps-detail", Static)
        if not 0 <= index < len(self.apps):
            detail.update(Text(""))
            return
        app = self.apps[index]
        detail.update(detail_text(app, describe_pids(app.pids)))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self.show_detail(event.cursor_row)

    def action_refresh_sample(self) -> None:
        """r: the app's newest probe sample."""
        self.sample = getattr(self.app, "latest_probe", self.sample)
        self.fill()
