"""One-way imports: the core never imports Textual (docs/architecture.md, "One-way imports")."""

import subprocess
import sys


def test_core_imports_without_textual():
    code = (
        "import sys, pkgutil, importlib, llmtop\n"
        "for m in pkgutil.walk_packages(llmtop.__path__, 'llmtop.'):\n"
        "    if m.name.startswith('llmtop.tui') or m.name in ('llmtop.__main__',):\n"
        "        continue\n"
        "    importlib.import_module(m.name)\n"
        "assert 'textual' not in sys.modules, sorted(k for k in sys.modules if k.startswith('textual'))\n"
        "print('ok', len([k for k in sys.modules if k.startswith('llmtop.')]))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("ok")
    # sessions, probes and engines were all imported
    assert int(p.stdout.split()[1]) >= 15
