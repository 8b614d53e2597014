"""Scrollbars drawn in whole cells, so that no scrollbar reads as one of llmtop's bar charts.

Textual's scrollbar ends its thumb with an eighth-block glyph (▁▂▃▄▅▆▇ vertically, ▉…▏
horizontally), repeated over the bar's thickness: a thumb end in a 2-column bar is "▅▅".
Those are the glyphs of llmtop's sparklines (`SparkBars`) and CPU bars (`fmt.bar`), and the
thumb's body is a coloured blank that a dim theme, a 256-colour tmux or a plain-text capture
(`tmux capture-pane -p`) barely shows: what a user sees is a stray pair of bars inside the
help box, the history table, the report box and, after a resize, the response pane — the
"ghost glyphs" a user reported. The thumb here is whole cells of the
scrollbar colour, on a track of the scrollbar background, one cell wide (llmtop.tcss).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual.scrollbar import ScrollBar, ScrollBarRender

WHOLE = [" "] * len(ScrollBarRender.VERTICAL_BARS)  # a blank end glyph: none is drawn


class WholeCellScrollBar(ScrollBarRender):
    """`ScrollBarRender` without the eighth-block thumb ends (the thumb moves by whole
    cells: a 30-line pane over 300 lines of text moves it one cell per 10 lines)."""

    VERTICAL_BARS: ClassVar[list[str]] = WHOLE
    HORIZONTAL_BARS: ClassVar[list[str]] = WHOLE


def use_whole_cell_scrollbars() -> None:
    """Draw every scrollbar of this process with `WholeCellScrollBar` (Textual's documented
    hook, a class attribute of `ScrollBar`; llmtop runs one Textual app per process)."""
    ScrollBar.renderer = WholeCellScrollBar


# The scrollbars' rule (one cell wide, the track shown), a stylesheet of its own so that every
# llmtop app loads it (package data of llmtop.tui, beside llmtop.tcss)
SCROLLBARS_TCSS = Path(__file__).resolve().parent.parent / "scrollbars.tcss"


__all__ = ["SCROLLBARS_TCSS", "WholeCellScrollBar", "use_whole_cell_scrollbars"]
