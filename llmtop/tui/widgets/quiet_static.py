"""A Static that asks for a screen layout only when its height changes."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class QuietStatic(Static):
    """`set_text` repaints in place while the wrapped height stays the same; a layout (which
    re-arranges the whole screen) only when the number of lines changes; nothing when the
    text is unchanged."""

    def _height(self, text: Text) -> int:
        width = self.content_size.width
        if width <= 0:
            return -1
        return len(text.wrap(self.app.console, width))

    _shown_height = -1  # the wrapped height of the text shown, at the width it was shown at

    def set_text(self, text: Text) -> None:
        """Show `text`; nothing at all when it is what is shown already (no repaint)."""
        old = self.content
        if isinstance(old, Text) and old == text:
            return
        height = self._height(text)
        same = isinstance(old, Text) and height == self._shown_height >= 0
        self._shown_height = height
        self.update(text, layout=not same)
