"""The request history: one DataTable row per finished request of the session (collapsible).

F2 shows it (and focuses the table) or hides it; in the table ↑/↓ move, Enter shows the
request's tokens and figures in the panes above (`Selected`), `c` compares it with the request
before (each figure's ratio, `session_state.compare`). Rows are added when a request ends and
a row's NOISY or status cell is rewritten when it changes (a first request is seen to be a
cold start once a later one shows what a warm load is) — nothing is redrawn otherwise.

The prompt is the last column and gets the room the figures leave (`prompt_room`): at any
width every figure and the status stay whole (the prompt keeps 6 characters at 80 columns, 46
at 120, 166 at 240), and a resize re-cuts the prompts to the new room.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Static

from llmtop.engines.events import Status
from llmtop.sessions.measure.metrics import TPOT, TTFT
from llmtop.tui.state import fmt
from llmtop.tui.state.session_state import (
    COMPARED,
    PROMPT_CHARS,
    HistoryRow,
    SessionState,
    compare,
    prompt_start,
)

COLUMNS: tuple[tuple[str, str], ...] = (
    ("n", "#"),
    ("time", "time"),
    (TTFT.name, TTFT.heading),
    (TPOT.name, TPOT.heading),
    ("decode", "decode cl/srv"),
    ("tokens", "tokens"),
    ("status", "status"),
    ("noisy", "noisy"),
    ("prompt", "prompt"),
)
MIN_PROMPT_CHARS = 6  # narrower than this, the table scrolls sideways instead


def _num(value: float | None, digits: int = 1) -> str:
    return fmt.NA if value is None else f"{value:.{digits}f}"


def noisy_cell(noisy: str | None) -> Text:
    """"⚠" (yellow) when a probe sample taken during the request was NOISY, else ""."""
    return Text("⚠", style="bold yellow") if noisy else Text("")


def status_cell(status: str) -> Text:
    """The status, green when ok, yellow otherwise (cold-start, error, cancelled…)."""
    return Text(status, style="green" if status.startswith(Status.OK) else "yellow")


def decode_cell(client: float | None, server: float | None) -> str:
    """"client/server" tok/s; "—" for the side that has no figure (a cancelled request has
    no server stats: "38.2/—"), one "n/a" when neither has one (not "n/a/n/a")."""
    if client is None and server is None:
        return fmt.NA
    return "/".join("—" if v is None else f"{v:.1f}" for v in (client, server))


def row_cells(row: HistoryRow, prompt_chars: int = PROMPT_CHARS) -> tuple[str | Text, ...]:
    """The cells of one row, in COLUMNS order: ms with 1 (TTFT) or 2 (TPOT) decimals, decode
    as client/server tok/s ("cl/srv", `decode_cell`), tokens suffixed " ch" when they are the
    client's chunk count, the prompt cut to `prompt_chars` ("…" when cut)."""
    tokens = fmt.NA if row.tokens is None else str(row.tokens)
    if row.tokens_basis == "chunks":
        tokens += " ch"
    return (
        str(row.number),
        row.time,
        _num(row.ttft_ms),
        _num(row.tpot_ms, 2),
        decode_cell(row.decode_tps, row.server_decode_tps),
        tokens,
        status_cell(row.status),
        noisy_cell(row.noisy),
        prompt_start(row.prompt, prompt_chars),
    )


def comparable(status: str) -> bool:
    """A finished request whose figures a ratio can use: ok or cold-start (not cancelled,
    not failed: their figures stop where the request did)."""
    # analysis.run (records, pydantic) when a row is compared, not before the first frame
    from llmtop.sessions.analysis.run import BenchStatus

    return status in (Status.OK, BenchStatus.COLD_START)


def previous_comparable(rows: list[HistoryRow], row: HistoryRow) -> HistoryRow | None:
    """The nearest request before `row` that `comparable` admits; None when there is none."""
    return next((r for r in reversed(rows[: row.number - 1]) if comparable(r.status)), None)


def compare_text(row: HistoryRow, before: HistoryRow | None,
                 skipped: tuple[HistoryRow, ...] = ()) -> Text:
    """"#3 ÷ #2  TTFT ×1.03  TPOT ×1.33  …": each figure of `row` over `before`'s.
    skipped: the requests between them that `comparable` refused, named with their status
    ("skipped #4 cancelled"), so "÷ #2" is not read as the request just before. A `row` that
    is not comparable itself says so first: its figures stop at its cancel or failure."""
    if before is None:
        what = "the first request" if not skipped else "the first finished request"
        return Text(f"#{row.number} is {what}: nothing before it to compare", "dim")
    ratios = compare(row, before)
    text = Text.assemble((f"#{row.number} ÷ #{before.number}", "bold"))
    if skipped:
        named = ", ".join(f"#{r.number} {r.status}" for r in skipped[-3:])
        more = f"{len(skipped) - 3} more, " if len(skipped) > 3 else ""
        text.append(f" (skipped {more}{named})", "dim")
    if not comparable(row.status):
        text.append(f" (#{row.number} {row.status}: its figures stop there)", "yellow")
    for name, _ in COMPARED:
        value = ratios[name]
        text.append(f"  {name} ")
        text.append(fmt.NA if value is None else f"×{value:.2f}", "bold")
    return text


class RequestHistory(Vertical):
    """The session's requests (see the module docstring). Hidden until F2."""

    BINDINGS: ClassVar[list[BindingType]] = [
        # not in the footer (at 80 columns it pushed the screen keys out): the box's title
        # says it, as it says Enter
        Binding("c", "compare", "Compare with previous", show=False),
    ]

    class Selected(Message):
        """Enter on a row: show request `number` (1-based) in the panes above."""

        def __init__(self, number: int) -> None:
            super().__init__()
            self.number = number

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.border_title = "history · Enter shows · c compares with the one before · F2 hides"
        self.rows: list[HistoryRow] = []
        self._version = -1
        self.prompt_chars = PROMPT_CHARS  # what the prompt cells are cut to now

    def compose(self) -> ComposeResult:
        table: DataTable[str | Text] = DataTable(id="history-table", cursor_type="row")
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        yield table
        yield Static("", id="history-compare")

    @property
    def table(self) -> DataTable[str | Text]:
        """The rows' DataTable."""
        return self.query_one("#history-table", DataTable)

    def sync(self, session: SessionState) -> bool:
        """Add the rows of requests that ended, rewrite NOISY cells that changed; only when
        `session.version` moved. True when something was drawn."""
        if session.version == self._version:
            return False
        self._version = session.version
        table = self.table
        # on the newest row (or none yet): follow the new ones, as a log viewer does; a row
        # the user moved to stays (else #9 and #10 were added below the box, unseen)
        following = table.cursor_row >= len(self.rows) - 1
        added = False
        for number in range(1, len(session.requests) + 1):
            row = session.row(number)
            if number > len(self.rows):
                self.rows.append(row)
                table.add_row(*row_cells(row, self.prompt_chars), key=str(number))
                added = True
            elif row != self.rows[number - 1]:  # a NOISY mark, or cold-start once a later
                before = self.rows[number - 1]  # request showed what a warm load is
                self.rows[number - 1] = row
                if row.noisy != before.noisy:
                    table.update_cell(str(number), "noisy", noisy_cell(row.noisy))
                if row.status != before.status:
                    table.update_cell(str(number), "status", status_cell(row.status))
        self.fit_prompts()  # a new row may have widened a figure's column
        if added and following:
            table.move_cursor(row=len(self.rows) - 1)
        return True

    def clear(self) -> None:
        """No rows (a new session, `MainScreen.new_session`): the next `sync` draws the new
        session's from its first request."""
        self.rows = []
        self._version = -1
        self.table.clear()
        self.query_one("#history-compare", Static).display = False

    def prompt_room(self) -> int:
        """The characters the prompt column has: the box's inner width less the figures'
        columns (each its widest cell + 2 of padding), the prompt's own padding and the
        vertical scrollbar's column; at least MIN_PROMPT_CHARS."""
        table = self.table
        used = sum(
            column.get_render_width(table)
            for key, column in table.columns.items()
            if key.value != "prompt"
        )
        free = self.content_size.width - used - 2 * table.cell_padding
        return max(MIN_PROMPT_CHARS, free - table.styles.scrollbar_size_vertical)

    def fit_prompts(self) -> None:
        """Re-cut every prompt cell to `prompt_room` when the room changed (a resize, F2
        showing the box, a wider figure); nothing is redrawn otherwise."""
        if not self.content_size.width:
            return  # hidden: the room is known once F2 shows the box
        room = self.prompt_room()
        if room == self.prompt_chars:
            return
        self.prompt_chars = room
        for row in self.rows:
            self.table.update_cell(
                str(row.number), "prompt", prompt_start(row.prompt, room), update_width=True
            )
        if self.rows:
            # DataTable caches a rendered cell by its content's version, not its width: the
            # cells drawn before the column widened stayed cut at the old width after a
            # resize back ("Explai" with 38 empty columns beside it). One
            # more update once the widths are in place draws them at the new width.
            self.call_after_refresh(self._redraw_prompts)

    def _redraw_prompts(self) -> None:
        last = self.rows[-1]
        self.table.update_cell(str(last.number), "prompt",
                               prompt_start(last.prompt, self.prompt_chars))

    def on_resize(self) -> None:
        self.fit_prompts()

    def selected(self) -> HistoryRow | None:
        """The row under the cursor (None when there is none)."""
        index = self.table.cursor_row
        return self.rows[index] if 0 <= index < len(self.rows) else None

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """The cursor moved: a comparison of another row no longer applies (else
        "#1 is the first request…" stayed under the table)."""
        self.query_one("#history-compare", Static).display = False

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if 0 <= event.cursor_row < len(self.rows):
            self.post_message(self.Selected(self.rows[event.cursor_row].number))

    def action_compare(self) -> None:
        """c: the selected request's figures over the previous request's (ratios)."""
        row = self.selected()
        if row is None:
            return
        before = previous_comparable(self.rows, row)
        skipped = tuple(self.rows[(before.number if before else 0):row.number - 1])
        line = self.query_one("#history-compare", Static)
        line.update(compare_text(row, before, skipped))
        line.display = True
