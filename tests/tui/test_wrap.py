"""The token pane's wrapper: incremental == from scratch, lines fit, no text is lost."""

from __future__ import annotations

import random

import pytest
from rich.cells import cell_len
from rich.text import Text

from llmtop.tui.state.wrap import IncrementalWrap, wrap_lines

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
