"""What every llmtop Textual app is built on (the main app, `llmtop watch`'s)."""

from __future__ import annotations

from textual.app import App

from llmtop.tui.widgets.scrollbars import SCROLLBARS_TCSS, use_whole_cell_scrollbars


class LlmtopBaseApp(App[int]):
    """What every llmtop Textual app shares (the main app, `llmtop watch`'s): its scrollbars
    one cell wide in whole cells (SCROLLBARS_TCSS first in its stylesheets, then the
    subclass's CSS_PATH; `use_whole_cell_scrollbars`). Before the watch app shared it, its
    probe panel showed the "▃▃" thumb ends that the main app had lost. `run()` returns the
    app's exit code (an `ExitCode` value)."""

    def __init__(self) -> None:
        own = self.CSS_PATH if isinstance(self.CSS_PATH, list) else [self.CSS_PATH]
        super().__init__(css_path=[SCROLLBARS_TCSS, *(p for p in own if p)])
        use_whole_cell_scrollbars()


__all__ = ["LlmtopBaseApp"]
