"""The probe panel: its texts from fixed samples (warming up, a grouped browser, llmtop's own and
the engine's CPU apart, the verdict), and samples reaching it as coalescing `ProbeSampled`
messages. How the panel looks: test_snapshots.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from textual.message import Message

from llmtop.probes.catalogue import Category
from llmtop.probes.verdict import Finding, Level, Verdict
from llmtop.tui.app import make_app
from llmtop.tui.messages import ProbeSampled
from llmtop.tui.state.settings import TuiSettings
from llmtop.tui.widgets.apps_view import apps_text
from llmtop.tui.widgets.probe_panel import STALE_AFTER_S, ProbePanel
from llmtop.tui.widgets.system_view import system_text
from llmtop.tui.widgets.verdict_badge import verdict_text

from .fakes import (
    BROWSER_BUSY,
    GIB,
    app_usage,
    browser_busy,
    busy_apps,
    fake_connection,
    machine_sample,
    system_sample,
    wait_for,
)

WARMING = Verdict.of(
    [Finding("warming-up", Level.INFO, None, None, "", "CPU figures need a second sample", "wait")]
)


def test_first_sample_says_warming_up_never_zero() -> None:
    sample = machine_sample(1, None, (app_usage("code", None, n=3),), WARMING, None)
    text = apps_text(sample.processes, sample.cost_ms).plain
    top = text.split("top apps")[1].split("llmtop itself")[0]
    assert "code ×3" in top and "warming up" in top and "0.0" not in top
    assert "llmtop itself:      warming up" in text
    badge = verdict_text(sample.verdict).plain
    assert badge == " WAIT  warming up\n• CPU figures need a second sample"
    assert system_text(sample.system).plain.startswith("CPU  warming up ")


def test_grouped_browser_self_and_engine_apart() -> None:
    sample = machine_sample(1, 40.0, busy_apps(), Verdict.of([browser_busy()]), 3.2)
    # columns: 🌐 (2 cells) or 2 spaces, the name padded to 17, CPU right-aligned in 11, then
    # RSS right-aligned in 10; the header's labels and llmtop's and the engine's figures end
    # in the same columns (new-user pass D26); llmtop (SELF) and llama (ENGINE) are left out
    # of the list
    assert apps_text(sample.processes, sample.cost_ms).plain.splitlines() == [
        "top apps        CPU% of 1 core       RSS",
        "🌐Chromium ×14          38.0 %   1.0 GiB",
        "  slack             warming up   1.0 GiB",
        "llmtop itself:           3.2 %",
        "engine:                 95.0 %",
        "probe cost 2.5 ms CPU per sample",
    ]
    assert verdict_text(sample.verdict).plain.splitlines() == [
        " NOISY ",
        f"• {BROWSER_BUSY}",
        "  → close the browser or its busy tabs",
    ]


def test_system_text_bars_memory_and_swap() -> None:
    # bars in eighths of a cell: 40 % of 16 cells = 51.2 → 51/8 = 6 full + "▍" (3/8);
    # per core 8 cells: 10 % → 6/8 "▊", 90 % → 57.6 → 58/8 = 7 full + "▎", 50 % → 4 full
    assert system_text(system_sample(40.0, (10.0, 90.0, 0.0, 50.0))).plain.splitlines() == [
        "CPU      40.0 % ██████▍         ",
        "load 0.50 per core (1 min)",
        " 0▕▊       ▏ 10   1▕███████▎▏ 90",
        " 2▕        ▏  0   3▕████    ▏ 50",
        "mem  4.0 GiB / 16.0 GiB (25 %)",  # 16 − 12 GiB available, 25 % used
        "swap 0 B / 2.0 GiB (0 %)",
    ]


async def test_samples_coalesce_and_the_latest_is_drawn(tmp_path: Path) -> None:
    """Samples posted faster than the app takes them: only the newest is handled (the others
    are replaced in the queue, `ProbeSampled.can_replace`), and the panel draws it."""
    seen: list[ProbeSampled] = []

    def hook(message: Message) -> None:
        if isinstance(message, ProbeSampled):
            seen.append(message)

    settings = TuiSettings(log_path=str(tmp_path / "s.jsonl"), probes=False)
    app = make_app(settings, connection=fake_connection())
    async with app.run_test(size=(140, 40), message_hook=hook) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        busy = Verdict.of([browser_busy()])
        samples = [machine_sample(t, 40.0, busy_apps(), busy, 3.2) for t in (1, 2, 3)]
        for sample in samples:  # no await in between: all three wait in the queue
            app.post_message(ProbeSampled(sample))
        panel = app.query_one(ProbePanel)
        await wait_for(pilot, lambda: panel.sample is samples[-1], what="the newest drawn")
        assert [m.sample for m in seen] == [samples[-1]]
        assert app.latest_probe is samples[-1]
        assert panel.texts["verdict"].plain == verdict_text(busy).plain
        assert panel.texts["apps"].plain == apps_text(samples[-1].processes, 2.5).plain


def test_system_text_many_cores_and_gpu() -> None:
    from llmtop.probes.gpu import GpuDevice, GpuSample

    gpu = GpuSample(
        available=True,
        devices=(
            GpuDevice(
                index=0,
                name="H200",
                util_percent=42.0,
                mem_util_percent=None,
                memory_used=2 * GIB,
                memory_total=141 * GIB,
                temperature_c=None,
                clock_graphics_mhz=None,
                clock_memory_mhz=None,
                clock_graphics_max_mhz=None,
                clock_memory_max_mhz=None,
                throttle_reasons=None,
                power_w=None,
                processes=(),
            ),
        ),
    )
    text = system_text(system_sample(12.5, tuple(float(i) for i in range(40))), gpu).plain
    assert "GPU0 42 % · 2.0 GiB / 141.0 GiB (NVML)" in text
    rows = [line for line in text.splitlines() if line[:3].strip().isdigit()]
    assert [r.split()[0] for r in rows] == ["0", "32"]  # one cell per core, 32 per row
    assert len(rows[0]) == 4 + 32 and len(rows[1]) == 4 + 8


async def test_only_changed_lines_are_repainted(tmp_path: Path) -> None:
    """An equal sample (another object) repaints nothing; one whose machine CPU changed
    repaints only the CPU line; the panel never asks for a screen layout."""
    settings = TuiSettings(log_path=str(tmp_path / "s.jsonl"), probes=False)
    app = make_app(settings, connection=fake_connection())
    async with app.run_test(size=(140, 40)) as pilot:
        panel = app.query_one(ProbePanel)
        assert panel.texts["verdict"].plain == "probes starting…"
        busy = Verdict.of([browser_busy()])
        panel.show(machine_sample(1, 40.0, busy_apps(), busy, 3.2))
        await pilot.pause()
        repainted: list[tuple[int, int]] = []
        layouts: list[bool] = []
        refresh_lines, refresh = panel.refresh_lines, panel.refresh

        def counting_lines(y_start: int, line_count: int = 1) -> None:
            repainted.append((y_start, line_count))
            refresh_lines(y_start, line_count)

        def counting(*regions: Any, **kw: Any) -> Any:
            layouts.append(bool(kw.get("layout")))
            return refresh(*regions, **kw)

        panel.refresh_lines = counting_lines  # type: ignore[method-assign]
        panel.refresh = counting  # type: ignore[method-assign]
        panel.show(machine_sample(2, 40.0, busy_apps(), Verdict.of([browser_busy()]), 3.2))
        assert repainted == []
        panel.show(machine_sample(3, 50.0, busy_apps(), busy, 3.2))
        # 42 columns inside the panel (46 − border − padding): the NOISY badge, its finding
        # "• Chromium (14 processes) is using 38 % CPU" (44 cells: 2 lines), the remedy, a
        # blank line; then the CPU line, 6th (index 5)
        assert repainted == [(5, 1)]
        assert not any(layouts)
        assert panel.texts["system"].plain.startswith("CPU      50.0 % ")


async def test_stale_process_data_is_marked_with_its_age(tmp_path: Path) -> None:
    # A sample whose process read gave up keeps the last process data, marked stale with its
    # age; with no sample at all for a while, the border says how old the data is.
    settings = TuiSettings(log_path=str(tmp_path / "s.jsonl"), probes=False)
    app = make_app(settings, connection=fake_connection())
    async with app.run_test(size=(140, 40)) as pilot:
        panel = app.query_one(ProbePanel)
        slack = (app_usage("slack", 12.0, Category.CHAT),)
        good = machine_sample(1_000_000_000, 10.0, slack, Verdict.of([]), 1.0)
        app.post_message(ProbeSampled(good))
        await wait_for(pilot, lambda: panel.sample is good, what="good sample drawn")
        # 2.5 s later the process read gave up: no process data in this sample
        gave_up = dataclasses.replace(good, t_ns=3_500_000_000, processes=None)
        app.post_message(ProbeSampled(gave_up))
        await wait_for(pilot, lambda: panel.sample is gave_up, what="stale sample drawn")
        await pilot.pause(0.1)
        text = panel.texts["apps"].plain
        assert "stale: process data from 2.5 s ago" in text
        assert "slack" in text and "process probe failed" not in text
        drawn_ns = panel._shown_ns
        assert drawn_ns is not None
        assert panel.check_age(drawn_ns + 1_000_000_000) == 1.0
        assert panel.border_title == "machine"
        later = drawn_ns + int((STALE_AFTER_S + 2) * 1e9)
        assert panel.check_age(later) == STALE_AFTER_S + 2
        assert panel.border_title == f"machine — stale, {STALE_AFTER_S + 2:.0f} s old"


async def test_a_hidden_machine_badge_asks_for_no_layout(tmp_path: Path) -> None:
    """At 140 columns the panel is shown and the one-line machine badge hidden (CSS); a new
    sample still reaches the badge (so it is right when the screen narrows), but a hidden
    widget has nothing to arrange: no screen layout per sample (~13 ms each on 2 cores)."""
    from llmtop.tui.widgets.machine_badge import MachineBadge

    settings = TuiSettings(log_path=str(tmp_path / "s.jsonl"), probes=False)
    app = make_app(settings, connection=fake_connection())
    async with app.run_test(size=(140, 40)) as pilot:
        # the badge is one of the parts mounted just after the first frame (screens/later.py)
        await wait_for(pilot, lambda: app.main_screen.later.whole, what="the rest mounted")
        badge = app.query_one(MachineBadge)
        await pilot.pause()
        assert not badge.display
        layouts: list[bool] = []
        refresh = badge.refresh

        def counting(*regions: Any, **kw: Any) -> Any:
            layouts.append(bool(kw.get("layout")))
            return refresh(*regions, **kw)

        badge.refresh = counting  # type: ignore[method-assign]
        badge.show(machine_sample(1, 40.0, busy_apps(), Verdict.of([browser_busy()]), 3.2))
        badge.show(machine_sample(2, 12.0, busy_apps(), Verdict.of([]), 3.2))
        assert layouts == [False, False]  # repainted (texts differ), never laid out
        assert "QUIET" in str(badge.content)


async def test_the_panel_scroll_room_does_not_shrink_with_each_sample(tmp_path: Path) -> None:
    """A 16-row screen: a NOISY sample's lines and a QUIET one's both overflow the panel, in
    different counts; once both have been shown, the panel keeps the larger scroll room
    between resizes instead of asking for a screen layout each time the count changes."""
    settings = TuiSettings(log_path=str(tmp_path / "s.jsonl"), probes=False)
    app = make_app(settings, connection=fake_connection())
    async with app.run_test(size=(140, 16)) as pilot:
        panel = app.query_one(ProbePanel)
        await pilot.pause()
        noisy = machine_sample(1, 40.0, busy_apps(), Verdict.of([browser_busy()]), 3.2)
        quiet = machine_sample(2, 12.0, busy_apps(), Verdict.of([]), 3.2)
        for sample in (noisy, quiet, noisy, quiet):
            panel.show(sample)
            await pilot.pause()
        tall = panel.virtual_size.height
        assert tall > panel.scrollable_content_region.height  # it overflows: the case
        layouts: list[bool] = []
        refresh = panel.refresh

        def counting(*regions: Any, **kw: Any) -> Any:
            layouts.append(bool(kw.get("layout")))
            return refresh(*regions, **kw)

        panel.refresh = counting  # type: ignore[method-assign]
        for sample in (noisy, quiet, noisy, quiet):
            panel.show(sample)
        assert panel.virtual_size.height == tall
        assert not any(layouts)


def test_a_cut_name_keeps_its_process_count() -> None:
    from llmtop.tui.widgets.apps_view import app_name

    # new-user pass D24/D26: "kernel threads ×40" (18 cells) in 17 read "kernel threads ×…"
    assert app_name("kernel threads", 40) == "kernel threa… ×40"  # 13 + " ×40" (4) = 17
    assert app_name("bash", 7) == "bash ×7" and app_name("a" * 20, 1) == "a" * 16 + "…"
    assert app_name("kernel threads", 1) == "kernel threads"


async def test_a_long_noisy_verdict_leaves_the_apps_their_room(tmp_path: Path) -> None:
    # new-user pass N7: 13 lines of NOISY findings pushed "top apps" to the panel's last line
    from llmtop.probes.verdict import Finding, Level

    long = "a long remedy that wraps over several lines of the panel " * 3
    findings = [Finding(f"f{i}", Level.FAIL, 60.0, 25.0, "%", f"finding {i}: " + "x " * 30,
                        long) for i in range(3)]
    settings = TuiSettings(log_path=str(tmp_path / "s.jsonl"), probes=False)
    app = make_app(settings, connection=fake_connection())
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.link.ready, what="connection")
        sample = machine_sample(1, 40.0, busy_apps(), Verdict.of(findings), 3.2)
        app.post_message(ProbeSampled(sample))
        panel = app.query_one(ProbePanel)
        await wait_for(pilot, lambda: panel.sample is sample, what="the sample drawn")
        verdict = panel.texts["verdict"].plain
        assert "→" not in verdict  # the remedies gave way
        assert verdict.endswith("(what to do: the session report, Ctrl+O)")
        lines = [panel.render_line(y).text for y in range(panel.size.height)]
        top = next(i for i, line in enumerate(lines) if line.startswith("top apps"))
        # the title, the two apps of busy_apps() and llmtop's and the engine's lines are on
        # screen without scrolling
        assert any(line.startswith("engine:") for line in lines[top:]), lines


def test_an_idle_app_is_dim_and_a_busy_one_bold() -> None:
    from llmtop.probes.catalogue import Category
    from llmtop.probes.processes import AppUsage, ProcessSample

    busy = AppUsage("hog", Category.OTHER, 99.0, 2**20, 1, (1,), False)
    idle = AppUsage("sleep", Category.OTHER, 0.0, 2**20, 1, (2,), False)
    text = apps_text(ProcessSample((busy, idle), 1.0, None, False, 2, 2))
    styles = {text.plain[s.start:s.end].strip(): str(s.style) for s in text.spans}
    assert styles["99.0 %"] == "bold" and styles["0.0 %"] == "dim"
    assert styles["sleep"] == "dim"
