"""The main screen's first frame holds only what it shows; the rest (the engine panel, the
machine badge, the history and the footer) is mounted just after it, in the places the
layout gives them, and a key that asks for one of them meanwhile is not lost."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from llmtop.tui.screens.main import MainScreen

from .fakes import wait_for
from .test_fake_engine import build

LATER = ("engine", "machine-badge", "history")


async def test_the_first_frame_leaves_the_hidden_parts_for_just_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app, _ = build(tmp_path)
    first: list[str | None] = []
    mounted = MainScreen.on_mount

    def on_mount(screen: MainScreen) -> None:  # the tree the first frame is laid out from
        first.extend(w.id or type(w).__name__ for w in screen.walk_children())
        mounted(screen)

    monkeypatch.setattr(MainScreen, "on_mount", on_mount)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.main_screen
        await wait_for(pilot, lambda: screen.later.whole, what="the rest mounted")
        assert "prompt" in first and not {*LATER, "Footer"} & set(first)
        # the order the stylesheet (llmtop.tcss) lays out: as when all were composed
        assert [w.id or type(w).__name__ for w in screen.children] == [
            "header", "main", "history", "prompt", "footer-slot"]
        assert screen.query_one("#footer-slot").children[0] is screen.query_one("Footer")
        assert [w.id for w in screen.query_one("#left").children] == [
            "tokens", "metrics", "session", "engine", "machine-badge"]
        assert screen.query_one("#history").display is False  # F2 shows it
        await pilot.press("f2")
        await pilot.pause()
        assert screen.query_one("#history").display is True


async def test_a_key_before_the_rest_is_mounted_runs_once_it_is(tmp_path: Path) -> None:
    app, _ = build(tmp_path)
    ran: list[bool] = []
    screen = app.main_screen
    screen.later.when_whole(lambda: ran.append(screen.later.whole))  # as F2 pressed before it
    assert ran == []
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: screen.later.whole, what="the rest mounted")
        assert ran == [True]  # run once, with everything there
        screen.later.when_whole(lambda: ran.append(screen.later.whole))
        assert ran == [True, True]  # afterwards at once


async def test_the_collector_is_on_again_once_the_first_frame_is_drawn(tmp_path: Path) -> None:
    """The terminal app starts with the garbage collector off (cli.py, until the first frame:
    imports and the first layout make objects by the hundred thousand); the app's Ready turns
    it on, so a long session is collected as any process is."""
    app, _ = build(tmp_path)
    gc.disable()
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: app.main_screen.later.whole, what="the rest mounted")
            assert gc.isenabled()
    finally:
        gc.enable()
