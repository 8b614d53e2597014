"""A failure to connect exits with the same code in the TUI as in `run` (one map,
`llmtop.engines.events.exit_code_for`); here with a real child engine refusing its model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from llmtop.exitcodes import ExitCode
from llmtop.tui.app import make_app
from llmtop.tui.state.settings import TuiSettings

from .fakes import wait_for


def bad_model(tmp_path: Path) -> Path:
    path = tmp_path / "not-a-model.gguf"
    path.write_bytes(b"this is not a GGUF file\n")
    return path


async def test_tui_exits_usage_for_a_bad_model_path(tmp_path: Path) -> None:
    settings = TuiSettings(engine="embedded", model_path=str(bad_model(tmp_path)),
                           log_path=str(tmp_path / "s.jsonl"), probes=False)
    app = make_app(settings)
    async with app.run_test() as pilot:
        await wait_for(pilot, lambda: app.connect_failure is not None, 60.0, "the failure")
        await pilot.press("ctrl+q")
    # README, "Exit codes": a bad model file is bad input (2), as in `llmtop run`
    assert app.exit_code == app.return_value == ExitCode.USAGE == 2  # what main() returns


def test_run_exits_usage_for_a_bad_model_path(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "llmtop", "--engine", "embedded", "--model-path",
         str(bad_model(tmp_path)), "run", "--prompt", "hi", "--log", str(tmp_path / "r.jsonl")],
        capture_output=True, text=True, check=False, timeout=120,
    )
    assert p.returncode == ExitCode.USAGE, p.stderr
    assert "--model-path" in p.stderr
