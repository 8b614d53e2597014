"""The watch screen (`llmtop watch`): one row per request passing through the watch as it
streams (caller, model, prompt tokens, TTFT, tok/s, cached %, status), the session's TTFT and
decode sparklines over the finished requests, the probe panel, and the selected row's
figures (its text only with --show-text).

The screen only shows: the lines come from the watch process (tui/watch.py feeds `take`),
the probe samples from the app's sampler (`show_probe`). Both only update state and set a
dirty flag; one timer draws at most RENDER_HZ times a second.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from llmtop.probes.sampler import ProbeSample
from llmtop.tui.state.watch_view import COLUMNS, WatchRows, cells, detail_lines
from llmtop.tui.widgets.probe_panel import ProbePanel
from llmtop.tui.widgets.spark_bars import SparkBars

RENDER_HZ = 8


class WatchScreen(Screen[None]):
    """The traffic of one `llmtop watch`. pairs: ("listen", "upstream") shown in the title
    line; show_text: the detail shows the selected request's text; probes: False when no
    samples will come (the panel says so)."""

    DEFAULT_CSS = """
    #watch-title { height: 1; padding: 0 1; color: $text-muted; }
    #watch-left { width: 1fr; }
    #watch-table { height: 1fr; }
    #watch-sparks { height: 2; padding: 0 1; }
    #watch-detail { height: auto; min-height: 12; max-height: 60%; border: round $primary 40%;
                    padding: 0 1; }
    #probes { width: 44; border: round $primary 40%; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("q", "app.quit", "Quit")]

    def __init__(self, pairs: list[tuple[str, str]], show_text: bool = False,
                 probes: bool = True) -> None:
        super().__init__()
        self.pairs, self.show_text, self.probes = pairs, show_text, probes
        self.state = WatchRows()
        self._dirty: set[int] = set()
        self._sample: ProbeSample | None = None
        self.note = ""

    def compose(self) -> ComposeResult:
        routes = "   ".join(f"{a} → {b}" for a, b in self.pairs)
        yield Static(f"llmtop watch   {routes}", id="watch-title")
        with Horizontal():
            with Vertical(id="watch-left"):
                yield DataTable(id="watch-table", cursor_type="row", zebra_stripes=True)
                with Vertical(id="watch-sparks"):
                    yield SparkBars(id="spark-ttft", stretch=False)
                    yield SparkBars(id="spark-decode", stretch=False)
                yield Static("no request yet: point an app at the address above",
                             id="watch-detail")
            yield ProbePanel(id="probes")
        yield Footer()

    def on_mount(self) -> None:
        if not self.probes:
            self.query_one(ProbePanel).off("probes off (--no-probes)")
        table = self.query_one(DataTable)
        for name in COLUMNS:
            table.add_column(name, key=name)
        self.set_interval(1 / RENDER_HZ, self.draw, name="watch-render")

    # ---------------------------------------------------------------- feeding

    def take(self, line: Mapping[str, Any]) -> None:
        """One line of the watch process (cheap: state and a dirty flag)."""
        rid = self.state.apply(line)
        if rid is not None:
            self._dirty.add(rid)

    def show_probe(self, sample: ProbeSample) -> None:
        """A probe sample for the panel (drawn on the next frame)."""
        self._sample = sample

    # ---------------------------------------------------------------- drawing

    def draw(self) -> None:
        """Draw what changed since the last frame."""
        if self._sample is not None:
            self.query_one(ProbePanel).show(self._sample)
            self._sample = None
        if not self._dirty:
            return
        table = self.query_one(DataTable)
        for rid in sorted(self._dirty):
            row = self.state.rows.get(rid)
            if row is None:
                continue
            values = cells(row)
            key = str(rid)
            if key in table.rows:
                for name, value in zip(COLUMNS, values, strict=True):
                    table.update_cell(key, name, value, update_width=True)
            else:
                table.add_row(*values, key=key)
        self._dirty.clear()
        self._draw_sparks()
        self._draw_detail()

    def _draw_sparks(self) -> None:
        ttft, decode = self.state.ttft_ms, self.state.decode_tps
        spark = self.query_one("#spark-ttft", SparkBars)
        spark.data = ttft
        spark.note = f"TTFT, last {ttft[-1]:.0f} ms ({len(ttft)} requests)" if ttft else "TTFT"
        spark = self.query_one("#spark-decode", SparkBars)
        spark.data = decode
        spark.note = f"decode, last {decode[-1]:.1f} tok/s" if decode else "decode"

    def selected(self) -> Mapping[str, Any] | None:
        """The row under the cursor (the newest when the table is empty of a cursor)."""
        table = self.query_one(DataTable)
        if table.row_count == 0:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return self.state.rows.get(int(key)) if key is not None else None

    def _draw_detail(self) -> None:
        row = self.selected()
        if row is not None:
            self.query_one("#watch-detail", Static).update(
                Text("\n".join(detail_lines(row, self.show_text))))

    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self._draw_detail()
