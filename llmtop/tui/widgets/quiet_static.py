"""A Static that asks for a screen layout only when its height changes."""

from __future__ import annotations

from rich.text import Text
from textual.events import Resize
from textual.widgets import Static

from llmtop.tui.state.wrap import break_at_separators


class QuietStatic(Static):
    """`set_text` repaints in place while the wrapped height stays the same; a layout (which
    re-arranges the whole screen) only when the number of lines changes; nothing when the
    text is unchanged. A line of " · "-joined parts breaks at its separators only
    (`wrap.break_at_separators`, at the content width), again on a resize."""

    _source: Text | None = None

    def set_text(self, text: Text) -> None:
        """Show `text`; nothing at all when it is what is shown already (no repaint). The new
        text's height (wrapped by Rich at the content width) is compared with the height the
        last layout gave the widget: a not yet laid out widget, or a text that does not fit as
        the old one did, asks for a layout; a hidden one (or one inside a hidden container)
        never does (each layout re-arranges the whole screen: ~13 ms on 2 cores, and the
        hidden machine badge asked for one with every probe sample)."""
        if self._source is not None and self._source == text:
            return
        self._source = text
        if not all(node.display for node in self.ancestors_with_self):
            # hidden (the machine badge on a wide screen, say): nothing to arrange now; when
            # it is shown, the change of `display` asks for the layout that sizes it
            self.update(text, layout=False)
            return
        width, height = self.content_size
        text = break_at_separators(text, width)
        same = width > 0 and len(text.wrap(self.app.console, width)) == height
        self.update(text, layout=not same)

    def on_resize(self, event: Resize) -> None:
        """Break the line again at the new width."""
        if self._source is None:
            return
        source, self._source = self._source, None
        self.set_text(source)
