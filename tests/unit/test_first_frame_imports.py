"""What the TUI imports before its first frame: the CLI, the config read (`probes.config`) and
the app's module. The probes (psutil, the GPU and energy readers), the engine identity and the
request's collector and curve store are drawn only after the engine side starts (on Textual's
Ready, `tui/link.py`, preloaded in a thread by `app.preload`), so they wait: each cost tens of
ms of the 0.5 s first-frame target on 2 cores (docs/performance.md, "The TUI's first frame")."""

from __future__ import annotations

import subprocess
import sys

# Each was imported before the first frame until it was moved to where it is used.
AFTER_FIRST_FRAME = (
    "psutil",
    "llmtop.probes.engine_identity",
    "llmtop.probes.sampler",
    "llmtop.probes.processes",
    "llmtop.probes.system",
    "llmtop.probes.gpu",
    "llmtop.probes.apple",
    "llmtop.sessions.measure.request",
    "llmtop.sessions.runners.curves",
    # mounted just after the first frame (tui/screens/later.py)
    "llmtop.tui.widgets.request_history",
    "llmtop.tui.widgets.engine_panel",
    "llmtop.tui.widgets.machine_badge",
)


def test_the_first_frame_imports_none_of_what_it_does_not_draw() -> None:
    code = ("import sys\n"
            "import llmtop.cli, llmtop.probes.config, llmtop.tui.app\n"
            f"print(sorted(m for m in {AFTER_FIRST_FRAME!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]"


def test_the_preload_imports_them() -> None:
    """What the first frame left out, the app's preload thread loads before it is needed."""
    code = ("import sys\n"
            "import llmtop.tui.app\n"
            "llmtop.tui.app.preload()\n"
            "print(sorted(m for m in ('psutil', 'llmtop.probes.engine_identity',"
            " 'llmtop.probes.sampler') if m not in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]"
