"""The apps screen (F3; issue 32, row 5: "a selected app shows pids and command lines,
respecting the privacy rules"): its rows, one app's processes, and the screen on a real
process of this test."""

from __future__ import annotations

import os
import time

from textual.widgets import DataTable, Static

from llmtop.probes.catalogue import Category
from llmtop.probes.processes import AppUsage, PidDetail, ProcessSample, describe_pids
from llmtop.tui.state.apps_detail import app_rows, detail_text

HOG = AppUsage("python3 -c …#4eda", Category.OTHER, 99.5, 12 * 2**20, 2, (4242, 4243), False)
SELF = AppUsage("llmtop", Category.SELF, 3.2, 80 * 2**20, 1, (7,), False)


def test_rows_say_what_each_app_is() -> None:
    sample = ProcessSample((HOG, SELF), 3.2, None, False, 3, 2)
    assert app_rows(sample) == [
        ("python3 -c …#4eda", "99.5 %", "12.0 MiB", "2", "other"),
        ("llmtop", "3.2 %", "80.0 MiB", "1", "llmtop itself"),
    ]
    assert app_rows(None) == []


def test_an_apps_processes_one_line_each() -> None:
    started = time.mktime((2026, 12, 3, 10, 2, 3, 0, 0, -1))  # local 10:02:03
    details = [PidDetail(4242, "python3 -c …#4eda", "alice", started, 1),
               PidDetail(4243, "(exited)", None, None, None, gone=True)]
    assert detail_text(HOG, details).plain.splitlines() == [
        "python3 -c …#4eda — 2 processes, 99.5 % CPU",
        "pid 4242    python3 -c …#4eda  user alice  1 thread  since 10:02:03",
        "pid 4243    exited since the sample",
    ]


def test_a_real_process_is_described_without_its_arguments() -> None:
    # this test's own interpreter: pytest's arguments must not appear, only the program
    import psutil

    (me,) = describe_pids([os.getpid()])
    assert me.pid == os.getpid() and not me.gone and me.threads and me.threads >= 1
    own = psutil.Process()
    assert me.program.startswith(own.name())  # "python3.11 -m pytest", "python3.11 pytest"…
    # nothing after the program or module is shown: pytest's own options and paths
    program_words = set(me.program.split())
    for arg in own.cmdline()[1:]:
        if arg not in ("-m",) and os.path.basename(arg) not in program_words:
            assert arg not in me.program, arg
    (gone,) = describe_pids([2**22 + 12345])  # above pid_max: no such process
    assert gone.gone and gone.program == "(exited)"


async def test_f3_lists_the_apps_and_the_selected_ones_processes(tmp_path) -> None:
    from llmtop.probes.verdict import Verdict
    from llmtop.tui.messages import ProbeSampled
    from llmtop.tui.screens.apps import AppsScreen

    from .fakes import machine_sample, wait_for
    from .test_fake_engine import build

    me = AppUsage("pytest-itself", Category.OTHER, 12.0, 2**20, 1, (os.getpid(),), False)
    app, _ = build(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        sample = machine_sample(1, 40.0, (me,), Verdict.of([]), 3.2)
        app.post_message(ProbeSampled(sample))
        await wait_for(pilot, lambda: app.latest_probe is sample, what="the sample")
        await pilot.press("f3")
        await wait_for(pilot, lambda: isinstance(app.screen, AppsScreen), what="apps screen")
        await pilot.pause()
        table = app.screen.query_one("#apps-table", DataTable)
        row = [str(c) for c in table.get_row_at(0)]
        assert (row[0], row[-1]) == ("pytest-itself", "other")
        detail = str(app.screen.query_one("#apps-detail", Static).render())
        assert f"pid {os.getpid()}" in detail and "thread" in detail
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, AppsScreen), what="closed")


async def test_at_80_columns_the_figures_are_whole(tmp_path) -> None:
    # new-user pass N32: F3 at 80x24 cut the RSS column ("212.4 Mi"); the kind now comes last
    from textual.widgets import DataTable

    from llmtop.probes.verdict import Verdict
    from llmtop.tui.messages import ProbeSampled
    from llmtop.tui.screens.apps import AppsScreen

    from .fakes import machine_sample, wait_for
    from .test_fake_engine import build
    from .test_screen_sizes import screen_lines

    engine = AppUsage("llama-server", Category.INFERENCE, 180.5, 663 * 2**20, 3, (9,), False)
    app, _ = build(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        sample = machine_sample(1, 40.0, (engine, SELF), Verdict.of([]), 2.0)
        app.post_message(ProbeSampled(sample))
        await wait_for(pilot, lambda: app.latest_probe is sample, what="the sample")
        await pilot.press("f3")
        await wait_for(pilot, lambda: isinstance(app.screen, AppsScreen), what="apps screen")
        await pilot.pause()
        assert app.screen.query_one("#apps-table", DataTable).row_count == 2
        shown = "\n".join(screen_lines(app))
        assert "663.0 MiB" in shown and "180.5 %" in shown
