"""Word-wrapping an append-only rich `Text`, re-wrapping only its last line on each append.

A greedy wrap that puts a word on the current line when it fits, else on a new line, and
folds a word wider than the line into width-sized pieces, is prefix-stable: appending text
can change only the last line and add lines after it. (Rich's own wrapper attaches overflowing
whitespace to lines of its own, which is not prefix-stable, hence this small one.) The token
pane's cost per frame is then proportional to what arrived, not to the whole answer.
Rich only; no Textual.
"""

from __future__ import annotations

import re

from rich.cells import cell_len, chop_cells
from rich.text import Text

from llmtop.safetext import has_control, visible

_WORD = re.compile(r"\s*\S+\s*")  # a word with the whitespace after it (and before, at start)


def line_breaks(plain: str, width: int) -> list[int]:
    """Character offsets (within one paragraph, no newlines) where wrapped lines start,
    after the first. Trailing whitespace never starts a line: it is cut at display time."""
    breaks: list[int] = []
    col = 0
    for match in _WORD.finditer(plain):
        start, word = match.start(), match.group()
        visible = word.rstrip()
        need = cell_len(visible)
        if col + need <= width:
            col += cell_len(word)
            continue
        if col and start:
            breaks.append(start)  # the word goes to a new line
        if need <= width:
            col = cell_len(word)
            continue
        # fold: only a paragraph's first word can have leading spaces, and they stay with it
        chunks = chop_cells(visible, width)
        offset = start
        for chunk in chunks[:-1]:
            offset += len(chunk)
            breaks.append(offset)
        col = cell_len(chunks[-1]) + (len(word) - len(visible))
    return breaks


def visible_text(text: Text) -> Text:
    """`text` with the control characters of what it holds from outside (a process name, a
    model name, a server's message) written as escapes (safetext.visible), its styles kept;
    `text` itself when it holds none."""
    if not has_control(text.plain):
        return text
    offsets = sorted({0, len(text.plain), *(s.start for s in text.spans),
                      *(s.end for s in text.spans)})
    out = Text(style=text.style, end=text.end, justify=text.justify, no_wrap=text.no_wrap)
    for piece in text.divide(offsets[1:-1]):
        shown = Text(visible(piece.plain))
        for span in piece.spans:  # each covers the whole piece: divided at every span's ends
            if span.end > span.start:
                shown.stylize(span.style)
        out.append_text(shown)
    return out


def wrap_lines(text: Text, width: int) -> tuple[list[Text], list[int]]:
    """Wrap `text` to `width` cells (newlines kept, long words folded, line ends trimmed).

    Returns the lines and the character offset in `text` where each line starts.
    """
    lines: list[Text] = []
    starts: list[int] = []
    pos = 0
    for para in text.split("\n", allow_blank=True):
        plain = para.plain
        breaks = line_breaks(plain, max(1, width))
        for start, part in zip([0, *breaks], para.divide(breaks), strict=True):
            part.rstrip()
            part.truncate(width)
            lines.append(part)
            starts.append(pos + start)
        pos += len(plain) + 1
    return lines, starts


class IncrementalWrap:
    """Wrapped lines of a growing Text. `update` re-wraps from the start of the last line;
    earlier lines are final. A text that is not an extension of the previous one (or a new
    width) is wrapped anew."""

    def __init__(self) -> None:
        self.width = 0
        self.lines: list[Text] = []
        self._committed = 0  # lines before this index are final
        self._offset = 0  # character offset where the last (open) line starts
        self._prefix = ""  # text.plain[:_offset] of the text wrapped last

    def reset(self, width: int = 0) -> None:
        """Forget everything (a new document, or a new width)."""
        self.width = width
        self.lines = []
        self._committed = 0
        self._offset = 0
        self._prefix = ""

    def update(self, text: Text, width: int) -> int:
        """Wrap `text` to `width`; returns the index of the first line that changed."""
        plain = text.plain
        if width != self.width or not plain.startswith(self._prefix):
            self.reset(width)
        new, starts = wrap_lines(text[self._offset :], width)
        first = self._committed
        self.lines[first:] = new
        self._committed = len(self.lines) - 1
        self._offset += starts[-1]
        self._prefix = plain[: self._offset]
        return first


SEPARATOR = " · "
CONTINUE_INDENT = "  "


def break_at_separators(text: Text, width: int, sep: str = SEPARATOR) -> Text:
    """`text` (one line of parts joined by `sep`, e.g. "server  prefill 200.0 tok/s · decode
    75.0 tok/s · load 10.0 ms") with line breaks at separators only, so no part is cut in two
    ("overhead" on one line, "8570.2 ms" on the next): a part goes on the current line when it
    fits in `width` cells, else the separator becomes a new line indented by CONTINUE_INDENT.
    Styles are kept. A part wider than a line alone is left for the wrapper to fold; a text
    that fits, has a newline, or width ≤ 0 comes back as it is."""
    plain = text.plain
    if width <= 0 or "\n" in plain or cell_len(plain) <= width or sep not in plain:
        return text
    starts = [0]
    cuts: list[tuple[int, int]] = []  # (end of a part, start of the next)
    at = plain.find(sep)
    while at >= 0:
        cuts.append((at, at + len(sep)))
        starts.append(at + len(sep))
        at = plain.find(sep, at + len(sep))
    ends = [c[0] for c in cuts] + [len(plain)]
    out = Text(end=text.end, justify=text.justify, no_wrap=text.no_wrap, overflow=text.overflow)
    out.style = text.style
    col = 0
    for i, (start, end) in enumerate(zip(starts, ends, strict=True)):
        part = text[start:end]
        need = cell_len(part.plain)
        if i == 0:
            out.append_text(part)
            col = need
            continue
        if col + len(sep) + need <= width:
            out.append_text(text[cuts[i - 1][0]:cuts[i - 1][1]])
            out.append_text(part)
            col += len(sep) + need
        else:
            out.append("\n" + CONTINUE_INDENT)
            out.append_text(part)
            col = len(CONTINUE_INDENT) + need
    return out
