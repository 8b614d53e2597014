"""The engine picker (F5): the engines that answer on this machine (`engines.discovery`, found
in the background after the first frame), one per line with its version, address and model;
Enter on one returns it (the app then reconnects to it: `tui.chooser.EngineChooser.switch`),
Esc keeps the engine in use."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from llmtop.engines.discovery import FoundEngine
from llmtop.safetext import one_line
from llmtop.tui.widgets.header_line import model_label


def engine_flag(found: FoundEngine) -> str:
    """The `--engine` value that measures `found`: "ollama", "embedded" or "openai"."""
    return {"ollama": "ollama", "llmtop-embedded": "embedded"}.get(found.kind, "openai")


def option_text(found: FoundEngine, in_use: bool) -> Text:
    """"llama-server b6500 · http://127.0.0.1:8080 · gemma-3-270m.gguf (in use)": a model
    listed as a file's path by its base name, as the header names it."""
    model = model_label(found.model) if found.model else "no model listed"
    words = [found.kind + (f" {one_line(found.version, 40)}" if found.version else ""),
             found.url, one_line(model, 60)]
    text = Text(" · ".join(words))
    if in_use:
        text.append("  (in use)", style="dim")
    return text


class EnginePicker(ModalScreen[FoundEngine | None]):
    """A list of `engines`; dismissed with the one picked (Enter), None on Esc. in_use: the
    root URL of the engine measured now (marked, and picking it changes nothing)."""

    CSS_PATH = "../picker.tcss"

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss_none", "Close")]

    def __init__(self, engines: Sequence[FoundEngine], in_use: str | None) -> None:
        super().__init__()
        self.engines = tuple(engines)
        self.in_use = in_use

    def compose(self) -> ComposeResult:
        with Vertical(id="picker-box") as box:
            box.border_title = "engines answering here"
            box.border_subtitle = "Enter reconnects · Esc keeps this one"
            yield OptionList(*(Option(option_text(e, e.url == self.in_use), id=str(i))
                               for i, e in enumerate(self.engines)), id="picker-list")
            yield Static("the session log starts afresh on the engine picked; "
                         "`llmtop engines` lists them from a shell", classes="dim")

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        picked = self.engines[int(event.option.id or 0)]
        self.dismiss(None if picked.url == self.in_use else picked)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
