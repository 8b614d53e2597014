"""One exit-code table: each code's meaning is written once, as its member's docstring in
llmtop/exitcodes.py (and what a stop signal does as `ExitCode`'s), and README.md and
docs/reference/files.md show the table rendered from them (docs/gen_reference.py writes it).
A copy edited by hand, or a code added without its meaning, fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from llmtop.exitcodes import ExitCode, markdown_table, meanings

ROOT = Path(__file__).resolve().parents[2]


def gen_reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference",
                                                  ROOT / "docs" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_code_has_its_meaning_in_one_row() -> None:
    table, stops = markdown_table().split("\n\n")
    lines = table.splitlines()
    assert set(meanings()) == set(ExitCode)
    assert lines[:2] == ["| code | name | meaning |", "|---|---|---|"]
    rows = [row.split(" | ")[:2] for row in lines[2:]]
    assert rows == [[f"| {c.value}", c.name] for c in sorted(ExitCode)]
    assert all("\n" not in text and text.endswith(".") for text in meanings().values())
    assert stops.startswith("On SIGINT, SIGTERM or SIGHUP") and "llmtop agent" in stops


@pytest.mark.parametrize("page", ["README.md", "docs/reference/files.md"])
def test_each_page_shows_the_table_exitcodes_renders(page: str) -> None:
    gen = gen_reference()
    assert page in gen.EXIT_CODE_PAGES
    text = (ROOT / page).read_text(encoding="utf-8")
    assert text == gen.with_section(text, gen.EXIT_CODES, markdown_table()), (
        f"{page}'s exit codes differ from llmtop/exitcodes.py's: run "
        ".venv/bin/python docs/gen_reference.py")


def test_a_page_without_the_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="exit codes"):
        gen_reference().with_section("# no table here\n", gen_reference().EXIT_CODES, "x")
