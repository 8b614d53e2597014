"""Every screen can be found (issue 32, rows 21 and 27; newcomer.md): the footer shows each
screen's key, README's one "Keys" line names them all, the command palette (Ctrl+P) lists
llmtop's screens, and its Screenshot says where it saved the file or why it could not."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from textual.binding import Binding
from textual.widgets import Input

from llmtop.tui.app import LlmtopApp
from llmtop.tui.screens.plots import PlotsScreen
from llmtop.tui.screens.report import ReportScreen

from .fakes import type_text, wait_for
from .test_fake_engine import build, drawn, send
from .test_screen_sizes import screen_cells

ROOT = Path(__file__).resolve().parents[2]
SCREENS = {
    "bench": "ctrl+b",
    "plots": "ctrl+g",
    "sessions": "ctrl+o",
    "load": "ctrl+l",
    "history": "f2",
    "help": "f1",
}


def shown_bindings() -> list[Binding]:
    return [b for b in LlmtopApp.BINDINGS if isinstance(b, Binding) and b.show]


def spelled(key: str) -> str:
    """ "ctrl+g" → "Ctrl+G", "f1" → "F1", "escape" → "Esc" (the README's spelling)."""
    if key == "escape":
        return "Esc"
    return "+".join(part.capitalize() if len(part) > 1 else part.upper() for part in key.split("+"))


def test_every_screen_key_is_in_the_footer_bindings() -> None:
    keys = {b.action: b.key for b in shown_bindings()}
    assert {action: keys.get(action) for action in SCREENS} == SCREENS


def test_readme_keys_line_names_every_footer_key() -> None:
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"Keys: (.*?) quit\.", readme, re.DOTALL)
    assert found is not None, "README has no 'Keys: … quit.' line"
    line = " ".join(found.group(1).split())
    keys = [b.key for b in LlmtopApp.BINDINGS if isinstance(b, Binding)]
    missing = [
        spelled(k)
        for k in keys
        if k not in ("question_mark", "slash", "q") and spelled(k) not in line
    ]
    assert missing == []
    assert "Ctrl+P palette" in line


async def test_footer_shows_the_screen_keys(tmp_path: Path) -> None:
    app, _ = build(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:  # all of them, even at 80 columns
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        await pilot.pause()
        cells = screen_cells(app)
        footer = "".join(cells[(x, 23)] for x in range(80))
    for words in (
        "^g Plots",
        "^o Sessions",
        "^l Load",
        "^b Bench",
        "f2 History",
        "f1 Help",
        "f3 Apps",
        "^p palette",
    ):
        assert words in footer, footer
    assert "Quit" not in footer  # not a screen: the help and the palette say Ctrl+Q


async def test_palette_opens_llmtops_screens(tmp_path: Path) -> None:
    """Ctrl+P, "Plots", Enter: the plots screen of this session; "Report": its report."""
    app, _ = build(tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await send(pilot, app, "hello")
        await wait_for(pilot, lambda: drawn(app), what="request drawn")
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert titles[:11] == ["Bench", "History", "Apps", "Conversation", "Help", "Plots",
                               "Sessions", "Load", "Report", "Engine", "Engines"]
        assert titles.count("Screenshot") == 1
        await pilot.press("ctrl+p")
        await pilot.pause()
        await type_text(pilot, "Plots")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, PlotsScreen), what="plots")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.default_screen, what="main screen")
        app.action_report()
        await wait_for(pilot, lambda: isinstance(app.screen, ReportScreen), what="report")
        assert app.screen.log_path == str(tmp_path / "s.jsonl")  # type: ignore[attr-defined]


async def test_screenshot_is_saved_beside_the_log_or_says_why_not(tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    app, _ = build(folder)
    notes: list[str] = []
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        app.notify = lambda message, **kw: notes.append(str(message))  # type: ignore[method-assign]
        app.action_save_screenshot()
        saved = list(folder.glob("*.svg"))
        # the name on its own line, then the folder (tmp_path is outside the home folder)
        assert len(saved) == 1 and notes == [f"{saved[0].name}\nin {folder}"]
        shutil.rmtree(folder)  # the log's folder is gone (its file stays open)
        app.action_save_screenshot()
        assert notes[1] == f"screenshot not saved in {folder}: No such file or directory"


def test_a_saved_files_toast_names_it_then_its_folder() -> None:
    from llmtop.tui.state.fmt import saved_where

    home = "/home/ana"
    assert saved_where("/home/ana/.local/share/llmtop/sessions/x.svg", home) == (
        "x.svg\nin ~/.local/share/llmtop/sessions")
    assert saved_where("/home/ana/x.svg", home) == "x.svg\nin ~"
    assert saved_where("/home/anabel/x.svg", home) == "x.svg\nin /home/anabel"  # not ~bel


async def test_keys_on_the_load_screen_stay_on_it(tmp_path: Path) -> None:
    # issue 32, finding A: "1,2" typed in the load screen's levels box and Enter reached the
    # hidden main prompt (a stray request "1,2"), and Ctrl+K turned the conversation on unseen
    from llmtop.tui.screens.load import LoadScreen

    app, _ = build(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await send(pilot, app, "hello")
        await wait_for(pilot, lambda: drawn(app), what="the first request")
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: isinstance(app.screen, LoadScreen), what="load screen")
        screen = app.screen
        box = screen.query_one("#load-levels", Input)
        box.focus()
        box.value = ""
        await type_text(pilot, "1,2")
        await pilot.press("ctrl+k", "ctrl+r")
        assert box.value == "1,2" and not app.main_screen.keep_history
        await pilot.press("enter")  # starts the sweep (its own requests, not the session's)
        await pilot.pause(0.2)
        assert box.value == "1,2"  # not cleared as a sent prompt is
        assert app.main_screen.last_prompt == "hello"
        assert app.link.recorder is not None and app.link.recorder.requests == 1


async def test_a_conversation_is_said_on_the_prompt_box_while_it_lasts(tmp_path: Path) -> None:
    # new-user pass D16: only a toast said Ctrl+K had started a conversation
    app, _ = build(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        prompt = app.query_one("#prompt", Input)
        assert not prompt.border_title
        await pilot.press("ctrl+k")
        await pilot.pause()
        assert app.main_screen.keep_history and prompt.border_title == (
            "conversation: each prompt follows the whole history · Ctrl+K ends it")
        await pilot.press("ctrl+k")
        await pilot.pause()
        assert not app.main_screen.keep_history and not prompt.border_title


async def test_quitting_says_where_the_session_log_is(tmp_path: Path) -> None:
    # new-user pass N36: quitting the TUI printed nothing, not the log's path
    from llmtop.tui.app import session_said

    app, _ = build(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await send(pilot, app, "hello")
        await wait_for(pilot, lambda: drawn(app), what="the request")
        said = session_said(app)
    assert said == f"llmtop: session log {tmp_path / 's.jsonl'} (1 request: 1 ok)"
