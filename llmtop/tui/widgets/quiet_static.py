"""A Static that asks for a screen layout only when its height changes."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class QuietStatic(Static):
    """`set_text` repaints in place while the wrapped height stays the same; a layout (which
    re-arranges the whole screen) only when the number of lines changes; nothing when the
    text is unchanged."""

    def set_text(self, text: Text) -> None:
        """Show `text`; nothing at all when it is what is shown already (no repaint). The new
        text's height (wrapped by Rich at the content width) is compared with the height the
        last layout gave the widget: a hidden or not yet laid out widget, or a text that does
        not fit as the old one did, asks for a layout."""
        old = self.content
        if isinstance(old, Text) and old == text:
            return
        width, height = self.content_size
        same = width > 0 and len(text.wrap(self.app.console, width)) == height
        self.update(text, layout=not same)
