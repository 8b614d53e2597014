"""The tools hold the style the code follows (docs/architecture.md, "Principles"): ruff with
the configured rule sets and line length, and mypy (strict flags on engines, sessions,
probes and the composition root, as configured in pyproject.toml). Both run on the tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False,
                          timeout=300)


def test_ruff_finds_nothing() -> None:
    result = run(str(BIN / "ruff"), "check", "llmtop", "tests", "bench")
    assert result.returncode == 0, result.stdout[-3000:]


def test_mypy_finds_nothing() -> None:
    result = run(str(BIN / "mypy"))
    assert result.returncode == 0, result.stdout[-3000:]
    assert result.stdout.startswith("Success: no issues found")
