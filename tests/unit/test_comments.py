"""Comments and docstrings are written for a reader who has the tree and nothing else.

A comment states the rule and its reason (and the measured figure that justifies it), not the
ticket, review pass or table row that once asked for it: "issue 32, row 13" or "new-user pass
N25" sends the reader to a tracker they do not have. That holds for every file of llmtop/ a
reader opens: its modules, its stylesheets (*.tcss) and its page (*.html). (That a name of a
module in the prose names one that exists: test_docstring_paths.py.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "llmtop"
TEXT_SUFFIXES = frozenset({".py", ".tcss", ".html"})

# A citation of the project's tracker or of a review written against it:
# "issue 32" / "issues 25" (a ticket), "new-user pass N25" / "newcomer row 8" (a review pass),
# "pass N29", "row 13" / "row F2" / "item 5" (a row of a ticket's table), "finding I" /
# "finding 8" / "finding F2", "review pass" / "review rows", "round 4" / "hostile round", and
# a review pass's bare code "(N29)", "D17", "P3"
# (N, P and D numbered the new-user passes' findings). Case-sensitive, so "p95", "Row 1" of a
# widget's own layout, "F3" (a key), "around 8.7 ms" and "can pass 100" are not citations.
TICKET = re.compile(
    r"\bissues? #?\d+"
    r"|\bnew-user\b|\bnewcomer\b"
    r"|\bpass [NPD]\d+"
    r"|\b(?:row|item) [A-Z]?\d+\b"
    r"|\bfinding (?:[A-Z]\d*|\d+)\b"
    r"|\breview(?:'s)? (?:pass|row|item|finding)s?\b"
    r"|\bround \d+\b(?![.,]\d)|\bhostile round\b"
    r"|\b[NPD]\d{1,2}\b"
)


def source_lines() -> Iterator[tuple[str, int, str]]:
    """(path relative to the repository, line number from 1, line) of every file of llmtop/
    a reader opens: its modules, stylesheets and page (TEXT_SUFFIXES)."""
    for path in sorted(p for p in PACKAGE.rglob("*") if p.suffix in TEXT_SUFFIXES):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            yield str(path.relative_to(ROOT)), number, line


def test_the_ticket_pattern_catches_each_form_and_nothing_else() -> None:
    cited = ["(issue 32, row 13)", "issues 25 and 26", "(new-user pass N32: x)", "(pass N29)",
             "newcomer row 8", "row F2", "item 5", "finding I:", "finding 8", "finding F2",
             "round 4", "hostile round", "(N29)", "the badge (D17)", "(P3)", "issue #12",
             "the review's pass", "review rows"]
    plain = ["TTFT p50/p95", "P95_MIN_SAMPLES", "Row 1 (live)", "the apps screen (F3)",
             "wobbled by 3 ms around 8.7 ms", "a busy app can pass 100", "the first row",
             "N_REQUESTS = 25", "D = 2", "github.com/Syllo/nvtop/issues/230", "a finding",
             "an item of the list", "to round 3.14159", "finding the cause",
             "a review of the code"]
    assert [c for c in cited if not TICKET.search(c)] == []
    assert [p for p in plain if TICKET.search(p)] == []


def test_no_line_in_llmtop_cites_a_ticket_pass_or_row() -> None:
    found = [f"{path}:{n}: {m.group(0)!r} in {line.strip()[:90]}"
             for path, n, line in source_lines() for m in [TICKET.search(line)] if m]
    assert found == [], "state the rule and its reason instead:\n" + "\n".join(found)
