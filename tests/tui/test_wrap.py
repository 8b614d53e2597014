"""The token pane's wrapper: incremental == from scratch, lines fit, no text is lost."""

from __future__ import annotations

import random

import pytest
from rich.cells import cell_len
from rich.text import Text

from llmtop.tui.state.wrap import IncrementalWrap, break_at_separators, wrap_lines

WORDS = ["a", "bb", "sky", "blue", "Rayleigh", "scattering", "x" * 30, "\n", "\n\n", "é", "漢字"]


@pytest.mark.parametrize(("seed", "width"), [(42, 17), (1, 9), (7, 40), (3, 5), (5, 2)])
def test_incremental_wrap_matches_wrapping_from_scratch(seed: int, width: int) -> None:
    rng = random.Random(seed)
    wrap = IncrementalWrap()
    text = Text()
    for step in range(300):
        text.append(rng.choice(WORDS) + rng.choice(["", " ", "   "]), "italic" if step < 50 else "")
        first = wrap.update(text, width)
        lines, _ = wrap_lines(text, width)
        assert [ln.plain for ln in wrap.lines] == [ln.plain for ln in lines]
        assert first <= len(wrap.lines)
        assert all(cell_len(ln.plain) <= width for ln in wrap.lines)
    kept = "".join(ln.plain for ln in wrap.lines)
    assert "".join(kept.split()) == "".join(text.plain.split())  # only whitespace is dropped


def test_wrap_breaks_between_words_and_folds_long_ones() -> None:
    lines, starts = wrap_lines(Text("the sky is blue\nabcdefghij"), 7)
    assert [ln.plain for ln in lines] == ["the sky", "is blue", "abcdefg", "hij"]
    assert starts == [0, 8, 16, 23]


def test_a_text_that_is_not_an_extension_is_wrapped_anew() -> None:
    wrap = IncrementalWrap()
    wrap.update(Text("one two three four five six"), 10)
    assert wrap.update(Text("uno dos"), 10) == 0
    assert [line.plain for line in wrap.lines] == ["uno dos"]


SERVER = (
    "server  prefill 200.0 tok/s · decode 75.0 tok/s · load 10.0 ms · overhead 8570.2 ms"
)  # 83 cells: over an 80-column strip's 78


def test_a_line_of_parts_breaks_at_its_separators_only() -> None:
    # new-user pass D20: at 80 columns the server line broke as "… · overhead" / "8570.2 ms"
    text = Text.assemble(("server", "dim"), "  prefill ", ("200.0 tok/s", "bold"),
                         " · decode 75.0 tok/s · load 10.0 ms · overhead ",
                         ("8570.2 ms", "bold"))
    assert text.plain == SERVER
    out = break_at_separators(text, 78)
    # "server … load 10.0 ms" is 62 cells; + " · overhead 8570.2 ms" (21) = 83 > 78: new line
    assert out.plain.split("\n") == [
        "server  prefill 200.0 tok/s · decode 75.0 tok/s · load 10.0 ms",
        "  overhead 8570.2 ms",
    ]
    # styles travel with their parts
    spans = {out.plain[s.start:s.end]: str(s.style) for s in out.spans}
    assert spans["server"] == "dim" and spans["200.0 tok/s"] == "bold"
    assert spans["8570.2 ms"] == "bold"
    # 40 cells: each part that fits after the last, else its own line
    assert break_at_separators(Text(SERVER), 40).plain.split("\n") == [
        "server  prefill 200.0 tok/s",
        "  decode 75.0 tok/s · load 10.0 ms",
        "  overhead 8570.2 ms",
    ]


def test_what_fits_or_has_no_separator_comes_back_as_it_is() -> None:
    line = Text(SERVER)
    assert break_at_separators(line, 83) is line  # fits exactly
    assert break_at_separators(line, 0) is line  # not laid out yet
    words = Text("a long line of words without any separator at all")
    assert break_at_separators(words, 10) is words
    two = Text("first · second\nthird · fourth")
    assert break_at_separators(two, 5) is two  # already broken by its maker
