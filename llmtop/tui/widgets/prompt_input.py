"""The prompt box: an `Input` where "?" as the first character asks for the help instead."""

from __future__ import annotations

from textual import events
from textual.geometry import Size
from textual.message import Message
from textual.widgets import Input

HELP_CHARACTER = "?"


class PromptInput(Input):
    """Printable keys are typed into the prompt ("q" and "?" included), except a "?" typed
    into an empty prompt, which posts `HelpRequested`.

    Decided here, in the Input's own key handler, because only here is `value` up to date:
    the app reads keys ahead of the Input (keys arrive in bursts from tmux or fast typists),
    so an app-level check of `value` would see an empty prompt mid-word.
    """

    class HelpRequested(Message):
        """The user typed "?" into an empty prompt."""

    def validate_virtual_size(self, size: Size) -> Size:
        """Never narrower than the box: a prompt that fits in it keeps one virtual size, so a
        keystroke repaints the box instead of asking for a layout of the whole screen (the
        Input sets its virtual width to the text's at every change; ~12 ms of CPU a key on a
        2-core machine). A longer prompt scrolls exactly as before."""
        return Size(max(size.width, self.scrollable_content_region.width), size.height)

    async def _on_key(self, event: events.Key) -> None:
        if event.character == HELP_CHARACTER and not self.value:
            event.stop()
            event.prevent_default()
            self.post_message(self.HelpRequested())
            return
        await super()._on_key(event)
