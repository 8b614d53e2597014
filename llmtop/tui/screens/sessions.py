"""The sessions screen (Ctrl+O): the saved session logs (`llmtop sessions`), and for the one
under the cursor its report (Enter / r), its plots (p), a comparison (c: the first press
takes it as the baseline A, a press on another log compares it with A, as `llmtop compare`),
or, for a watch log, the load screen ready to replay it (l, as `llmtop load --replay`).

The logs are read in a thread worker (each is read in full for its verdict), so a long list
never blocks the screen.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from llmtop.sessions.analysis.catalog import SessionEntry, catalogue
from llmtop.sessions.analysis.compare.logs import compare_logs
from llmtop.sessions.records.log import LogError, read_log
from llmtop.sessions.reports.compare import markdown as compare_markdown
from llmtop.sessions.reports.formats import render
from llmtop.sessions.reports.run import build
from llmtop.tui.screens.plots import PlotsScreen
from llmtop.tui.screens.report import ReportScreen

# the verdict early: at 80 columns the last column was off screen; the
# cells are `llmtop sessions`' own, in this order
COLUMNS = ("date", "kind", "verdict", "requests", "engine", "model")
ORDER = (0, 3, 5, 4, 1, 2)  # each column's index in SessionEntry.cells()
HINT = ("Enter/r report · p plots · c compare (first c: baseline A; then c on B) · l replay a "
        "watch log · Esc back")


def cells(e: SessionEntry) -> tuple[str, ...]:
    """One row of the table: SessionEntry.cells (the same as `llmtop sessions`) in COLUMNS'
    order."""
    whole = e.cells()
    return tuple(whole[i] for i in ORDER)


class SessionsScreen(Screen[None]):
    """The logs in `paths` (files or folders; default the user data dir's sessions
    folder), newest first."""

    DEFAULT_CSS = """
    #sessions-hint { height: auto; padding: 0 1; color: $text-muted; }
    #sessions-table { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "app.pop_screen", "Back"),
        Binding("r", "report", "Report"),
        Binding("p", "plots", "Plots"),
        Binding("c", "compare", "Compare with…"),
        Binding("l", "replay", "Replay"),
    ]

    def __init__(self, paths: Sequence[str] = ()) -> None:
        super().__init__()
        self.paths = tuple(paths)
        self.entries: list[SessionEntry] = []
        self.baseline: SessionEntry | None = None

    def compose(self) -> ComposeResult:
        yield Static("reading the session logs…", id="sessions-hint")
        table: DataTable[str] = DataTable(id="sessions-table", cursor_type="row")
        table.add_columns(*COLUMNS)
        yield table
        yield Footer()

    def on_mount(self) -> None:
        self.load()

    @work(thread=True, exclusive=True)
    def load(self) -> None:
        """Read the catalogue off the UI thread, then fill the table."""
        entries = catalogue(self.paths)
        self.app.call_from_thread(self.show, entries)

    def show(self, entries: list[SessionEntry]) -> None:
        """Fill the table with `entries` (newest first)."""
        self.entries = entries
        table = self.query_one("#sessions-table", DataTable)
        table.clear()
        for i, e in enumerate(entries):
            table.add_row(*cells(e), key=str(i))
        where = ", ".join(self.paths) or "the sessions folder"
        self.query_one("#sessions-hint", Static).update(
            f"{len(entries)} log{'s' * (len(entries) != 1)} in {where}. {HINT}"
            if entries
            else f"no session logs in {where}"
        )
        table.focus()

    @property
    def selected(self) -> SessionEntry | None:
        """The entry under the cursor, None when the list is empty."""
        row = self.query_one("#sessions-table", DataTable).cursor_row
        return self.entries[row] if 0 <= row < len(self.entries) else None

    def on_data_table_row_selected(self, _: DataTable.RowSelected) -> None:
        self.action_report()

    def action_report(self) -> None:
        """The selected log's markdown report."""
        e = self.selected
        if e is None:
            return
        try:
            text = render(build(read_log(e.path)), "md")
        except LogError as exc:
            self.notify(str(exc), severity="error")
            return
        self.app.push_screen(ReportScreen(text, e.path, title="report"))

    def action_plots(self) -> None:
        """The selected log's plots."""
        if (e := self.selected) is not None:
            self.app.push_screen(PlotsScreen(e.path))

    def action_replay(self) -> None:
        """A watch log: the load screen on the app's connection, in its replay mode with this
        log's path (Start sends it); any other log, or no ready connection, is said."""
        e = self.selected
        if e is None:
            return
        if e.kind != "watch":
            self.notify(f"l replays a `llmtop watch` log; this is a {e.kind or 'unreadable'} "
                        "log", severity="warning")
            return
        link = getattr(self.app, "link", None)
        if link is None or link.conn is None or not link.ready:
            self.notify("a replay needs the engine connected: wait for it, then press l again",
                        severity="warning")
            return
        from llmtop.tui.screens.load import LoadScreen

        self.app.pop_screen()
        self.app.push_screen(LoadScreen(link.conn, link.settings, replay_path=e.path))

    def action_compare(self) -> None:
        """First press: take the selected log as the baseline A. Next press on another log:
        the comparison of it (B) with A."""
        e = self.selected
        if e is None:
            return
        if self.baseline is None or self.baseline.path == e.path:
            self.baseline = e
            self.notify(f"baseline A: {e.path}; select B and press c")
            return
        a, self.baseline = self.baseline, None
        try:
            comparison = compare_logs(read_log(a.path), read_log(e.path), (a.path, e.path))
        except LogError as exc:
            self.notify(str(exc), severity="error")
            return
        # the command that gives the same, with what a refusal asks for ("--vary max_tokens"):
        # the TUI cannot pass it (shown `llmtop report B` alone, a user could not get it)
        vary = sorted(set(re.findall(r"--vary (\w+)", " ".join(comparison.checks.problems))))
        command = " ".join(["llmtop compare", shlex.quote(a.path), shlex.quote(e.path),
                            *(f"--vary {v}" for v in vary)])
        self.app.push_screen(ReportScreen(compare_markdown([comparison]), e.path,
                                          title="compare", command=command))
