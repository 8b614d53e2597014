"""A failure to connect exits with the same code in the TUI as in `run` (one map,
`llmtop.engines.events.exit_code_for`); here with a real child engine refusing its model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from textual.widgets import Static

from llmtop.engines.events import FailureKind
from llmtop.exitcodes import ExitCode
from llmtop.testing.scripted import ScriptedUpstream
from llmtop.tui.app import make_app
from llmtop.tui.state.connect_failure import connect_failure_view
from llmtop.tui.state.settings import TuiSettings
from llmtop.tui.widgets.token_pane import TokenPane

from .fakes import wait_for


def bad_model(tmp_path: Path) -> Path:
    path = tmp_path / "not-a-model.gguf"
    path.write_bytes(b"this is not a GGUF file\n")
    return path


async def test_tui_exits_usage_for_a_bad_model_path(tmp_path: Path) -> None:
    settings = TuiSettings(
        engine="embedded",
        model_path=str(bad_model(tmp_path)),
        log_path=str(tmp_path / "s.jsonl"),
        probes=False,
    )
    app = make_app(settings)
    async with app.run_test() as pilot:
        await wait_for(pilot, lambda: app.link.connect_failure is not None, 60.0, "the failure")
        await pilot.press("ctrl+q")
    # README, "Exit codes": a bad model file is bad input (2), as in `llmtop run`
    assert app.exit_code == app.return_value == ExitCode.USAGE == 2  # what main() returns


def test_run_exits_usage_for_a_bad_model_path(tmp_path: Path) -> None:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmtop",
            "--engine",
            "embedded",
            "--model-path",
            str(bad_model(tmp_path)),
            "run",
            "--prompt",
            "hi",
            "--log",
            str(tmp_path / "r.jsonl"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert p.returncode == ExitCode.USAGE, p.stderr
    assert "--model-path" in p.stderr


async def test_a_missing_model_is_not_called_unreachable(tmp_path: Path) -> None:
    """A real Ollama-API server (the scripted one) that has "timed" but not "timd": the
    engine was reached, so the pane shows connect's own message with its "did you mean"
    and Ollama's advice, the header says "model not found", and the exit code is 4
    (README, "Exit codes"), never "Could not reach an engine"."""
    with ScriptedUpstream() as up:
        settings = TuiSettings(
            engine="ollama",
            host=up.url,
            model="timd",
            log_path=str(tmp_path / "s.jsonl"),
            probes=False,
        )
        app = make_app(settings)
        async with app.run_test() as pilot:
            await wait_for(pilot, lambda: app.link.connect_failure is not None, 30.0, "the failure")
            await pilot.pause()
            text = app.query_one(TokenPane).text.plain
            header = str(app.query_one("#hdr-engine", Static).content)
            await pilot.press("ctrl+q")
    assert "Could not reach" not in text
    first, remedy = text.splitlines()
    assert first == (  # connect's words, as `llmtop run` prints them, after the title
        f"✗ The engine answered: model 'timd' not found at {up.url} "
        "(installed: ok, timed, thinking, slow); did you mean timed?"
    )
    assert remedy == "→ pull it with `ollama pull timd` or pick an installed one with --model"
    assert header == "llmtop · model not found"
    assert app.exit_code == ExitCode.MODEL_NOT_FOUND == 4


def test_only_an_unanswered_connect_reads_unreachable() -> None:
    """ "Could not reach an engine" for UNREACHABLE and TIMEOUT (nothing answered) only."""
    said = {kind: connect_failure_view(kind) for kind in FailureKind}
    reached = [k for k, v in said.items() if "Could not reach" in v.title]
    assert reached == [FailureKind.UNREACHABLE, FailureKind.TIMEOUT]
    assert said[FailureKind.MODEL_NOT_FOUND].header == "model not found"
    assert all(v.header == "no engine" for k, v in said.items() if k in reached)
