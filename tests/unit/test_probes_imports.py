"""The probes never import Textual (docs/architecture.md, "One-way imports")."""

from __future__ import annotations

import subprocess
import sys

MODULES = ["catalogue", "system", "processes", "gpu", "verdict", "sampler"]


def test_probes_do_not_import_textual() -> None:
    code = (
        "import sys\n"
        + "".join(f"import llmtop.probes.{m}\n" for m in MODULES)
        + "print(sorted(m for m in sys.modules if m.split('.')[0] == 'textual'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
