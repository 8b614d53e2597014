"""The response as it streams: answer text plain, thinking text dim italic.

A Line-API `ScrollView`: streamed text is wrapped incrementally (`llmtop.tui.state.wrap`) and only
the pane's own lines are repainted, so a frame costs what arrived since the last one instead
of a re-layout of the whole screen.

A change of the pane's virtual size is a layout of the whole screen (every widget re-rendered:
the largest cost of the streaming TUI, profiled with py-spy, bench/tui_cost.py). While a
request streams, the virtual height therefore grows a page (the pane's height) at a time
rather than a line at a time, and is trimmed to the text when the request ends; it is never
less than the pane's height, so an answer that fits in the pane asks for no layout at all.

Following the text jumps: a scroll repaints every line of the pane and its scrollbar (~8 ms of
CPU for a 26-line pane on a 2-core machine), so scrolling one line per new line cost ~3 such
repaints a second at 50 tok/s. While a request streams, when the text runs past the bottom,
the view scrolls by FOLLOW_JUMP of the pane at once, leaving blank lines below the last one
for the next lines to fill; when the request ends, its last line is put at the bottom.
"""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.events import Resize
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget

from llmtop.engines.events import Failure, Status
from llmtop.safetext import visible
from llmtop.tui.state.live import THINKING, LiveRequest
from llmtop.tui.state.wrap import IncrementalWrap

THINKING_STYLE = "italic dim"
FOLLOW_JUMP = 1 / 3  # following a streaming text, scroll by a third of the pane at a time
WELCOME = (
    "Type a prompt below and press Enter.  F1 (or ? in an empty prompt) explains every number."
)


def failure_text(failure: Failure, title: str = "✗ ") -> Text:
    """A failure's message (red) and its remedy on the next line."""
    text = Text.assemble((f"{title}{visible(failure.message)}", "bold red"))
    if failure.remedy:
        text.append(f"\n→ {visible(failure.remedy)}", style="yellow")
    return text


def live_text(live: LiveRequest) -> Text:
    """The prompt, then thinking (dim italic) and answer text in arrival order, then how it
    ended if not OK; text from the engine shown with its control characters as escapes
    (safetext.visible: an answer cannot retitle the window). Append-only while the request
    streams (so wrapping stays incremental)."""
    text = Text.assemble((f"› {visible(live.prompt)}", "bold cyan"), "\n\n")
    previous = None
    for kind, pieces in live.parts:
        if previous == THINKING:
            text.append("\n")
        text.append(
            "".join(pieces).replace("\t", "    "),  # made visible as they came (live.py)
            style=THINKING_STYLE if kind == THINKING else "",
        )
        previous = kind
    result = live.result
    if result is not None and result.status == Status.CANCELLED:
        text.append("\n[cancelled]", style="yellow")
    elif live.failure is not None:
        text.append("\n\n")
        text.append_text(failure_text(live.failure))
    return text


def forward_typing(widget: Widget, event: events.Key) -> None:
    """Post a key meant for the prompt box as `TokenPane.TypedAhead` (the main screen types
    it there): a printable key (not "/", the app's "back to the prompt"), Enter ("\r") and
    Backspace ("\b"). For the main screen's focusable panes (the response, the machine
    panel): keys arrive in bursts (a paste, tmux, a fast typist), and an Enter read before
    the prompt had the focus was lost ("idle esc fast" + Enter
    typed the text and sent nothing; after Tab, letters vanished in the machine panel)."""
    if not hasattr(widget.screen, "on_token_pane_typed_ahead"):
        return  # a screen with no prompt box (`llmtop watch`'s): its keys are its own
    if event.key in ("enter", "backspace"):
        character = "\r" if event.key == "enter" else "\b"
    elif event.is_printable and event.character and event.character != "/":
        character = event.character
    else:
        return
    event.stop()
    event.prevent_default()
    widget.post_message(TokenPane.TypedAhead(character))


class TokenPane(ScrollView, can_focus=True):
    """Follows the text while the view is at the bottom; keeps the position otherwise.

    Focused (Esc when idle, to scroll the answer), a printable key is not lost: it posts
    `TypedAhead` and the main screen types it into the prompt box (without it, after Esc the
    letters of the next prompt vanished, "?" opened the help and "q" quit the app). "/" is
    the app's "back to the prompt" key and stays one.
    """

    class TypedAhead(Message):
        """A character typed while the response pane had the focus."""

        def __init__(self, character: str) -> None:
            super().__init__()
            self.character = character

    def on_key(self, event: events.Key) -> None:
        """A key for the prompt box goes there (`forward_typing`)."""
        forward_typing(self, event)

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.border_title = "response"
        self.text = Text(WELCOME, style="dim")
        self._doc: object = None  # what `text` shows: a LiveRequest, or a token per message
        self._wrap = IncrementalWrap()
        self._strips: list[Strip] = []

    def _set(self, text: Text, doc: object, *, growing: bool = False) -> None:
        at_end = self.scroll_y >= self._last_top()
        if doc is not self._doc:
            self._doc = doc
            self._wrap.reset()
        self.text = text
        first = self._rewrap(growing)
        if first is None:
            return
        scroll_y = self.scroll_y
        if at_end:
            self.scroll_to(y=self._follow_top(growing), animate=False, immediate=True)
        if self.scroll_y != scroll_y or first == 0:
            self.refresh()  # the view moved or everything changed
        else:  # repaint only the lines that changed (usually the last one)
            self.refresh_lines(first, len(self._strips) - first)

    def _last_top(self) -> int:
        """The scroll position that shows the text's last line at the bottom of the pane."""
        return max(0, len(self._strips) - self.scrollable_content_region.height)

    def _jump(self) -> int:
        """How many lines a jump leaves free below the last line (FOLLOW_JUMP of the pane)."""
        return max(1, int(self.scrollable_content_region.height * FOLLOW_JUMP))

    def _follow_top(self, growing: bool) -> int:
        """Where to scroll to follow the text: while it grows, stay until its last line runs
        past the bottom, then jump (`_jump` free lines below it); else the last line at the
        bottom."""
        last_top = self._last_top()
        if not growing or last_top == 0:
            return last_top
        if self.scroll_y >= last_top:  # the last line is still in view
            return round(self.scroll_y)
        return last_top + self._jump()

    def _rewrap(self, growing: bool = False) -> int | None:
        """Re-wrap what changed; the first changed line, or None before the first layout.
        `growing`: more text is coming, so the virtual height grows a page at a time."""
        width = self.scrollable_content_region.width
        if width <= 0:
            return None  # not laid out yet: on_resize wraps
        first = self._wrap.update(self.text, width)
        console = self.app.console
        del self._strips[first:]
        for line in self._wrap.lines[first:]:
            self._strips.append(Strip(list(line.render(console)), line.cell_len))
        lines = len(self._strips)
        height = self.scrollable_content_region.height
        if growing:
            page = max(1, height)
            if lines > height:
                lines += self._jump()  # room to jump past the last line
            if first and self.virtual_size.width == width and lines <= self.virtual_size.height:
                return first  # still inside the pages already laid out
            lines = -(-lines // page) * page
        # never below the pane's height: a text that fits changes nothing (no layout)
        size = Size(width, max(lines, height))
        if size != self.virtual_size:
            self.virtual_size = size  # a layout: only per page while streaming
        return first

    def on_resize(self, _: Resize) -> None:
        self._wrap.reset()
        self._strips.clear()
        self._rewrap()
        self.refresh()

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        style = self.rich_style
        index = scroll_y + y
        if index >= len(self._strips):
            return Strip.blank(width, style)
        return self._strips[index].crop_extend(scroll_x, scroll_x + width, style).apply_style(style)

    def show_message(self, message: str, style: str = "dim") -> None:
        """Replace the content with a status line (e.g. "starting engine…")."""
        self._set(Text(message, style=style), object())

    def show_failure(self, failure: Failure, title: str) -> None:
        """Replace the content with a failure and its remedy (e.g. the engine did not start)."""
        self._set(failure_text(failure, title), object())

    def show_live(self, live: LiveRequest) -> None:
        """Render the request so far (called by the app's capped render timer only)."""
        self._set(live_text(live), live, growing=live.result is None)
