"""A markdown report laid out for a terminal box.

The report's tables are written for a page (`llmtop report`,
`sessions/reports/run_markdown.py`): ten columns squeezed into a 120-column box wrapped each
cell over 4–6 lines ("n/a" / "(n" / "<" / "20)") and cut the headers ("warm-u…"). In the TUI
a table wider than MAX_COLUMNS becomes one bullet per row: its first cell in bold, then each
other column as "header value", joined by " · " — prose that wraps at the box's width like
any line. Narrow tables (the environment's item | value) and everything else pass through
unchanged.
"""

from __future__ import annotations

import re

MAX_COLUMNS = 3  # tables up to this many columns fit a terminal box as they are
_CELL_SPLIT = re.compile(r"(?<!\\)\|")  # md_cell escapes a "|" inside a cell as "\|"
_SEPARATOR = re.compile(r"^\|?\s*:?-{3,}")


def cells(line: str) -> list[str]:
    """The cells of one markdown table row, stripped ("| a | b |" → ["a", "b"])."""
    inner = line.strip()
    inner = inner.removeprefix("|")
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [c.strip() for c in _CELL_SPLIT.split(inner)]


def row_bullets(header: list[str], rows: list[list[str]]) -> list[str]:
    """One bullet per row: "- **first cell** — header value · header value …"."""
    out = []
    for row in rows:
        pairs = [f"{h} {v}" for h, v in zip(header[1:], row[1:], strict=False) if v]
        out.append(f"- **{row[0]}** — " + " · ".join(pairs))
    return out


def terminal_markdown(markdown: str, max_columns: int = MAX_COLUMNS) -> str:
    """`markdown` with every table wider than `max_columns` rewritten as `row_bullets`."""
    lines = markdown.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        is_table = (
            line.lstrip().startswith("|")
            and i + 1 < len(lines)
            and _SEPARATOR.match(lines[i + 1].strip()) is not None
        )
        if not is_table:
            out.append(line)
            i += 1
            continue
        header = cells(line)
        j = i + 2
        rows = []
        while j < len(lines) and lines[j].lstrip().startswith("|"):
            rows.append(cells(lines[j]))
            j += 1
        if len(header) > max_columns:
            out += row_bullets(header, rows)
        else:
            out += lines[i:j]
        i = j
    return "\n".join(out) + ("\n" if markdown.endswith("\n") else "")


__all__ = ["MAX_COLUMNS", "cells", "row_bullets", "terminal_markdown"]
