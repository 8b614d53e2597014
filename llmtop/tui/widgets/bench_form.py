"""The bench form: requests, warm-up, prompt sizes (tokens), max output tokens on its first
row; the context phases after the sweep (cache pairs, conversation turns) and Start on its
second (one row of all six does not fit 80 columns).

Enter in any field or the Start button posts `BenchForm.StartRequested` with the raw texts;
the screen validates them (`llmtop.tui.state.bench_config.config_from_form`).
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, Input, Label

# (field id, label, Input type, width in cells: the text, the cursor, border and padding)
FIELDS: tuple[tuple[str, str, str, int], ...] = (
    ("requests", "requests", "integer", 8),
    ("warmup", "warm-up", "integer", 7),
    ("prompt-tokens", "prompt tokens", "text", 16),
)
# the second row: the answer's length, then what `llmtop bench --cache-pairs N --turns N`
# runs after the sweep (max tokens moved here: on the first row it was cut at 80 columns,
# each row now fits 80: 65 and 79 cells)
CONTEXT_FIELDS: tuple[tuple[str, str, str, int], ...] = (
    ("max-tokens", "max tokens", "integer", 8),
    ("cache-pairs", "cache pairs", "integer", 7),
    ("turns", "conversation turns", "integer", 7),
)


class BenchForm(Vertical):
    """Two rows of labelled Inputs (FIELDS, CONTEXT_FIELDS) and a Start button."""

    class StartRequested(Message):
        """Start a bench with these field texts, by field id."""

        def __init__(self, values: dict[str, str]) -> None:
            super().__init__()
            self.values = values

    def __init__(self, defaults: dict[str, str], **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._defaults = defaults

    def compose(self) -> ComposeResult:
        with Horizontal(classes="bench-row"):
            yield from self._fields(FIELDS)
        with Horizontal(classes="bench-row"):
            yield from self._fields(CONTEXT_FIELDS)
            yield Button("Start", id="bench-start", variant="success")

    def _fields(self, fields: tuple[tuple[str, str, str, int], ...]) -> ComposeResult:
        for fid, label, kind, width in fields:
            yield Label(label, classes="bench-label")
            field = Input(self._defaults.get(fid, ""), type=kind, id=f"bench-{fid}")  # type: ignore[arg-type]
            field.styles.width = width
            field.cursor_blink = False  # no repaint twice a second during a measurement
            yield field

    def values(self) -> dict[str, str]:
        """The fields' current texts, by field id."""
        return {fid: self.query_one(f"#bench-{fid}", Input).value
                for fid, *_ in (*FIELDS, *CONTEXT_FIELDS)}

    def set_running(self, running: bool) -> None:
        """Lock the form while a bench runs."""
        for widget in self.query(Input):
            widget.disabled = running
        self.query_one("#bench-start", Button).disabled = running

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.post_message(self.StartRequested(self.values()))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.post_message(self.StartRequested(self.values()))
