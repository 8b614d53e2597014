"""Comments and docstrings are written for a reader who has the tree and nothing else.

A comment states the rule and its reason (and the measured figure that justifies it), not the
ticket, review pass or table row that once asked for it: "issue 32, row 13" or "new-user pass
N25" sends the reader to a tracker they do not have. And a docstring that names a module names
one that exists: a file that was split or renamed leaves its old name behind in the prose
around it, and the reader then looks for a file that is not there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "llmtop"

# A citation of the project's tracker or of a review written against it:
# "issue 32" / "issues 25" (a ticket), "new-user pass N25" / "newcomer row 8" (a review pass),
# "pass N29", "row 13" / "row F2" / "item 5" (a row of a ticket's table), "finding I" /
# "finding 8", "round 4" / "hostile round", and a review pass's bare code "(N29)", "D17", "P3"
# (N, P and D numbered the new-user passes' findings). Case-sensitive, so "p95", "Row 1" of a
# widget's own layout, "F3" (a key), "around 8.7 ms" and "can pass 100" are not citations.
TICKET = re.compile(
    r"\bissues? #?\d+"
    r"|\bnew-user\b|\bnewcomer\b"
    r"|\bpass [NPD]\d+"
    r"|\b(?:row|item) [A-Z]?\d+\b"
    r"|\bfinding (?:[A-Z]|\d+)\b"
    r"|\bround \d+\b(?![.,]\d)|\bhostile round\b"
    r"|\b[NPD]\d{1,2}\b"
)

# A module named by a path: a token with at least one "/" that ends in ".py", not part of a
# longer path or a URL ("sessions/measure/request.py", "bench/tui_cost.py").
SLASHED = re.compile(r"(?<![\w./:-])((?:[\w.-]+/)+[\w-]+\.py)\b")
# A module named by its file name alone ("records.py"). Not after "python " or "python3 ":
# that is a user's command line in an example ("python3 train.py"), not one of ours.
BARE = re.compile(r"(?<![\w./:-])(?<!python )(?<!python3 )([A-Za-z_]\w*\.py)\b")


def source_lines() -> Iterator[tuple[str, int, str]]:
    """(path relative to the repository, line number from 1, line) of every llmtop/**/*.py."""
    for path in sorted(PACKAGE.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            yield str(path.relative_to(ROOT)), number, line


def test_the_ticket_pattern_catches_each_form_and_nothing_else() -> None:
    cited = ["(issue 32, row 13)", "issues 25 and 26", "(new-user pass N32: x)", "(pass N29)",
             "newcomer row 8", "row F2", "item 5", "finding I:", "finding 8", "round 4",
             "hostile round", "(N29)", "the badge (D17)", "(P3)", "issue #12"]
    plain = ["TTFT p50/p95", "P95_MIN_SAMPLES", "Row 1 (live)", "the apps screen (F3)",
             "wobbled by 3 ms around 8.7 ms", "a busy app can pass 100", "the first row",
             "N_REQUESTS = 25", "D = 2", "github.com/Syllo/nvtop/issues/230", "a finding",
             "an item of the list", "to round 3.14159"]
    assert [c for c in cited if not TICKET.search(c)] == []
    assert [p for p in plain if TICKET.search(p)] == []


def test_no_line_in_llmtop_cites_a_ticket_pass_or_row() -> None:
    found = [f"{path}:{n}: {m.group(0)!r} in {line.strip()[:90]}"
             for path, n, line in source_lines() for m in [TICKET.search(line)] if m]
    assert found == [], "state the rule and its reason instead:\n" + "\n".join(found)


def _resolves(token: str, path: Path) -> bool:
    """Whether a slashed module path names a file: read from the repository's root, from
    llmtop/, from llmtop/sessions/ (whose wings, analysis/, reports/, runners/, records/,
    measure/, the tree names by their own folder) or from the writing file's package or any
    package above it."""
    bases = [ROOT, PACKAGE, PACKAGE / "sessions", *path.parents]
    return any((base / token).is_file() for base in bases
               if base == ROOT or base.is_relative_to(PACKAGE))


def test_the_slash_pattern_takes_paths_only() -> None:
    line = ('see sessions/measure/request.py and `bench/tui_cost.py --py-spy`; '
            'https://example.org/a/b.py and a/b.pyc are not ours; records.py is bare')
    assert SLASHED.findall(line) == ["sessions/measure/request.py", "bench/tui_cost.py"]
    assert BARE.findall(line + '; "python3 train.py"') == ["records.py"]
    here = PACKAGE / "sessions" / "reports" / "html.py"
    assert _resolves("sessions/measure/request.py", here)  # from llmtop/
    assert _resolves("analysis/run.py", here)  # from llmtop/sessions/
    assert _resolves("bench/tui_cost.py", here)  # from the repository's root
    assert not _resolves("reports/html_report.py", here)


def test_every_module_path_named_in_llmtop_exists() -> None:
    missing = [f"{path}:{n}: {token}" for path, n, line in source_lines()
               for token in SLASHED.findall(line) if not _resolves(token, ROOT / path)]
    assert missing == [], "these name no file:\n" + "\n".join(missing)


def test_every_module_file_name_in_llmtop_exists() -> None:
    names = {p.name for top in ("llmtop", "bench", "tests") for p in (ROOT / top).rglob("*.py")}
    missing = [f"{path}:{n}: {token}" for path, n, line in source_lines()
               for token in BARE.findall(line) if token not in names]
    assert missing == [], "no module has these names:\n" + "\n".join(missing)
