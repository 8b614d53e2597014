"""The documentation holds: the site builds in strict mode, generated pages match the code,
the architecture's drawings match the import contracts, and the README stays a door."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from llmtop.sessions.records.schema import RECORD_TYPES

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MKDOCS = Path(sys.executable).with_name("mkdocs")
README_MAX_BYTES = 15 * 1024


def build(tree: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of the project (docs/ and mkdocs.yml) under `tree`."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([str(MKDOCS), "build", "--strict", "-f", str(tree / "mkdocs.yml"),
                           "-d", str(out)], capture_output=True, text=True, env=env, check=False,
                          timeout=240)


def copy_docs(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(DOCS, tree / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tree / "mkdocs.yml")
    return tree


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    result = build(ROOT, tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "reference" / "session-log" / "index.html").exists()


@pytest.mark.parametrize("break_it", ["link", "nav"])
def test_a_broken_link_or_a_page_outside_the_nav_fails_the_build(tmp_path: Path,
                                                                 break_it: str) -> None:
    tree = copy_docs(tmp_path)
    if break_it == "link":
        page = tree / "docs" / "guide" / "bench.md"
        page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md).\n")
    else:
        (tree / "docs" / "guide" / "orphan.md").write_text("# Not in the navigation\n")
    result = build(tree, tmp_path / "site")
    assert result.returncode != 0
    named = "no-such-page.md" if break_it == "link" else "orphan.md"
    assert named in result.stdout + result.stderr


def test_generated_pages_match_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    monkeypatch.setenv("COLUMNS", gen.WIDTH)
    for name, make in gen.PAGES.items():
        assert (DOCS / name).read_text(encoding="utf-8") == make(), (
            f"docs/{name} is stale: run .venv/bin/python docs/gen_reference.py")


def contract_layers() -> dict[str, list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {c["id"]: c["layers"] for c in config["tool"]["importlinter"]["contracts"]
            if c["type"] == "layers"}


def test_the_architecture_drawings_are_the_contracts() -> None:
    text = (DOCS / "architecture.md").read_text()
    drawn = {m.group(1): m.group(2).strip().splitlines() for m in re.finditer(
        r"<!-- contract: ([\w-]+) -->\n```text\n(.*?)```", text, re.DOTALL)}
    contracts = contract_layers()
    assert drawn.keys() == contracts.keys(), "every layers contract is drawn, and only those"
    for name, layers in contracts.items():
        assert drawn[name] == layers, f"docs/architecture.md's drawing of {name!r} differs"


def test_the_session_log_reference_names_every_record_type() -> None:
    text = (DOCS / "reference" / "session-log.md").read_text()
    for kind, cls in RECORD_TYPES.items():
        assert f"| `{kind}` | `{cls.__name__}` |" in text, kind


def test_the_readme_is_a_door() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= README_MAX_BYTES
    for command in ("make run", "make test"):
        assert f"\n{command} " in readme
    from llmtop.cli import COMMANDS

    for name in COMMANDS:
        assert f"- `llmtop {name}" in readme, f"the README's tour lacks `llmtop {name}`"


def test_docs_cited_in_the_code_exist() -> None:
    cited = set()
    for path in [*ROOT.joinpath("llmtop").rglob("*.py"), *ROOT.joinpath("bench").rglob("*.py")]:
        cited |= set(re.findall(r"docs/[\w/-]+\.md", path.read_text(encoding="utf-8")))
    missing = sorted(c for c in cited if not (ROOT / c).exists())
    assert cited and not missing, missing
