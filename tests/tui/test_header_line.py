"""The header's identity at every width (issue 32, finding H: it was cut mid-word at 80)."""

from __future__ import annotations

from llmtop.tui.widgets.header_line import LOG_ROOM, fit_parts

# the embedded engine's header as identity_parts ranks it (0: always kept)
PARTS = [
    (0, "llmtop"), (0, "embedded"), (5, "http://127.0.0.1:41234"), (0, "gemma3:270m"),
    (2, "Q8_0"), (3, "268.10M"), (6, "v0.3.36"), (4, "llama.cpp repack on"),
]
WHOLE = ("llmtop · embedded · http://127.0.0.1:41234 · gemma3:270m · Q8_0 · 268.10M · v0.3.36"
         " · llama.cpp repack on")


def test_a_wide_header_keeps_every_part() -> None:
    assert len(WHOLE) == 105  # 120 columns less the log's 13 hold it
    assert fit_parts(PARTS, 120 - LOG_ROOM) == WHOLE


def test_a_narrow_header_drops_whole_parts_version_first() -> None:
    # 100 columns: 87 cells; without " · v0.3.36" (10) 95, without the host's 25 cells 70
    assert fit_parts(PARTS, 100 - LOG_ROOM) == (
        "llmtop · embedded · gemma3:270m · Q8_0 · 268.10M · llama.cpp repack on"
    )
    # 80 columns: 67 cells; the configuration's " · llama.cpp repack on" (22) goes too: 48
    assert fit_parts(PARTS, 80 - LOG_ROOM) == "llmtop · embedded · gemma3:270m · Q8_0 · 268.10M"


def test_the_parts_that_stay_are_cut_only_when_nothing_else_can_go() -> None:
    # "llmtop · embedded · gemma3:270m" is 31 cells: in 30 it ends with "…"
    assert fit_parts(PARTS, 30) == "llmtop · embedded · gemma3:27…"
    assert fit_parts(PARTS, 0) == ""
