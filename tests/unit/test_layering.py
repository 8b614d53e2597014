"""One-way imports (docs/architecture.md, "Layers"), held two ways.

1. import-linter's contracts in pyproject.toml: the layers, "only the TUI imports
   Textual", the route inside sessions (runners | reports, analysis, records, measure), the
   layers inside reports (and the other renderers apart from a run's report), the layers
   inside llmtop's own servers, and "only the HTML pages and plots import plotly and
   markdown-it".
   The test runs `lint-imports` on the tree, and on copies of the tree with one upward
   import planted (between packages, inside sessions, inside reports, a load report reaching
   for a run's, plotly in a text renderer, Textual in the TUI's state, a widget importing a
   screen), each of which must be caught and named.
2. A fresh interpreter imports every module outside the TUI (and the TUI's pure state,
   whose settings the CLI builds) and Textual must not be among the loaded modules, as
   harlequin checks its headless core.
"""

from __future__ import annotations

import importlib.util
import os
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import llmtop

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """Run import-linter on the package under `tree` with the project's contracts."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                          cwd=tree, env=env, capture_output=True, text=True, check=False,
                          timeout=120)


def test_the_contracts_hold() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {CONTRACTS} kept, 0 broken." in result.stdout


CONTRACTS = 9
PLANTED = [  # (the module that imports, what it must not import, the contract it breaks)
    ("llmtop.engines.events", "llmtop.sessions.reports.run", "llmtop's layers"),
    # a client reaching for llmtop's own servers (Connection once needed the child class)
    ("llmtop.engines.connection", "llmtop.servers.child", "llmtop's layers"),
    # the wire stamping knows no client
    ("llmtop.stamping.stamps", "llmtop.engines.events", "llmtop's layers"),
    ("llmtop.servers.guard", "llmtop.servers.embedded.app", "llmtop's servers"),
    ("llmtop.servers.agent.server", "llmtop.servers.relay.server", "llmtop's servers"),
    ("llmtop.sessions.records.schema", "llmtop.sessions.runners.bench",
     "The route of a measurement"),
    ("llmtop.sessions.measure.timeline", "llmtop.sessions.analysis.run",
     "The route of a measurement"),
    ("llmtop.sessions.reports.text", "llmtop.sessions.reports.formats", "Reports: formats"),
    ("llmtop.sessions.reports.run", "plotly", "Only the HTML pages and their plots"),
    # a run's Report is below its own renderers, not below the others
    ("llmtop.sessions.reports.load", "llmtop.sessions.reports.run",
     "The other renderers and plots import nothing"),
    ("llmtop.tui.state.live", "textual", "The TUI's state imports no Textual"),
    ("llmtop.tui.widgets.token_pane", "llmtop.tui.screens.bench", "The TUI: app, screens"),
]


@pytest.mark.parametrize(("importer", "imported", "contract"), PLANTED)
def test_an_upward_import_is_caught(tmp_path: Path, importer: str, imported: str,
                                    contract: str) -> None:
    shutil.copytree(ROOT / "llmtop", tmp_path / "llmtop",
                    ignore=shutil.ignore_patterns("__pycache__"))
    planted = tmp_path.joinpath(*importer.split(".")).with_suffix(".py")
    planted.write_text(planted.read_text() + f"\nimport {imported}  # planted\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout
    assert " broken." in result.stdout and ", 0 broken." not in result.stdout
    broken = result.stdout[result.stdout.index("Broken contracts"):]
    assert contract in broken
    assert f"{importer} -> {imported}" in broken


def test_core_imports_without_textual() -> None:
    names = [m.name for m in pkgutil.walk_packages(llmtop.__path__, "llmtop.")
             if (not m.name.startswith("llmtop.tui.") or m.name.startswith("llmtop.tui.state"))
             and m.name != "llmtop.__main__"]
    # the TUI's state (the CLI builds its settings) imports without Textual too
    assert "llmtop.tui.state.settings" in names
    if importlib.util.find_spec("locust") is None:  # the `load` extra is not installed
        names.remove("llmtop.loadtest.locustfile")
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(k for k in sys.modules if k.split('.')[0] == 'textual'))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"
    # every layer below the TUI was imported: cli, commands, connect, sessions, servers,
    # probes, engines, stamping, exitcodes
    assert {n.split(".")[1] for n in names} >= {"cli", "commands", "connect", "sessions",
                                                 "servers", "probes", "engines", "stamping",
                                                 "exitcodes"}
