"""A one-line label for a file path that, when too long, keeps the end (the file name)."""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import Static


def elide_start(text: str, width: int) -> str:
    """`text` if it fits in `width` cells, else "…" + its last width − 1 cells."""
    if width <= 0 or cell_len(text) <= width:
        return text
    tail = text
    while tail and cell_len(tail) > width - 1:
        tail = tail[1:]
    return "…" + tail


class PathLabel(Static):
    """Shows `prefix + path`, eliding the start of the path to fit the widget's width."""

    def __init__(self, prefix: str = "", **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self.prefix = prefix
        self.path = ""

    def set_path(self, path: str) -> None:
        """Show `path` (e.g. the session log)."""
        self.path = path
        self.refresh()

    def render(self) -> Text:
        if not self.path:
            return Text("")
        room = self.content_size.width - cell_len(self.prefix)
        return Text.assemble(self.prefix, elide_start(self.path, room), style="dim")
