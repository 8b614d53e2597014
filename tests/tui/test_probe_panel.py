"""The probe panel renders samples posted as messages: warming up, browsers, self CPU, verdict."""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from llmtop.probes.catalogue import Category
from llmtop.probes.processes import AppUsage, ProcessSample
from llmtop.probes.sampler import ProbeSample
from llmtop.probes.system import SystemSample
from llmtop.probes.verdict import Finding, Level, Verdict
from llmtop.tui.app import make_app
from llmtop.tui.messages import ProbeSampled
from llmtop.tui.settings import TuiSettings
from llmtop.tui.widgets.probe_panel import STALE_AFTER_S, ProbePanel

from .fakes import fake_connection, wait_for

GIB = 1024**3


def system(cpu: float | None, per_cpu: tuple[float, ...] = ()) -> SystemSample:
    return SystemSample(
        cpu_percent=cpu,
        per_cpu=per_cpu,
        load_avg_per_core=0.5,
        mem_total=16 * GIB,
        mem_available=12 * GIB,
        mem_percent=25.0,
        swap_total=2 * GIB,
        swap_used=0,
        swap_percent=0.0,
        cpu_freq_mhz=None,
        cpu_freq_max_mhz=None,
        on_battery=None,
        logical_cpus=len(per_cpu) or 4,
    )


def app_usage(
    name: str, cpu: float | None, category: Category = Category.OTHER, n: int = 1
) -> AppUsage:
    return AppUsage(
        app=name,
        category=category,
        cpu_percent=cpu,
        rss_bytes=GIB,
        n_procs=n,
        pids=tuple(range(n)),
        is_browser=category is Category.BROWSER,
    )


def sample(
    cpu: float | None, apps: tuple[AppUsage, ...], verdict: Verdict, self_cpu: float | None
) -> ProbeSample:
    procs = ProcessSample(
        apps=apps, self_cpu_percent=self_cpu, engine_cpu_percent=95.0, warming_up=self_cpu is None
    )
    return ProbeSample(
        t_ns=1,
        wall_time="t",
        system=system(cpu, (10.0, 90.0, 0.0, 50.0)),
        processes=procs,
        gpu=None,
        verdict=verdict,
        cost_ms=2.5,
    )


@contextlib.asynccontextmanager
async def panel_app(tmp_path: Path) -> AsyncIterator[tuple[Any, Any, ProbePanel]]:
    """The app without probes (samples are posted by hand): (app, pilot, its probe panel)."""
    settings = TuiSettings(log_path=str(tmp_path / "s.jsonl"), probes=False)
    app = make_app(settings, connection=fake_connection())
    async with app.run_test(size=(140, 40)) as pilot:
        yield app, pilot, app.query_one(ProbePanel)


async def test_probe_panel_warming_up_browser_self_and_verdict(tmp_path: Path) -> None:
    async with panel_app(tmp_path) as (app, pilot, panel):
        warming = Verdict.of(
            [
                Finding(
                    "warming-up",
                    Level.INFO,
                    None,
                    None,
                    "",
                    "CPU figures need a second sample",
                    "wait",
                )
            ]
        )
        app.post_message(ProbeSampled(sample(None, (app_usage("code", None, n=3),), warming, None)))
        await wait_for(pilot, lambda: panel.sample is not None, what="first sample drawn")
        text = panel.plain
        assert "warming up" in text and "0.0" not in text.split("top apps")[1].split("engine")[0]
        assert "llmtop itself: warming up" in text

        busy = Finding(
            "browser-busy",
            Level.WARN,
            38.0,
            10.0,
            "% CPU",
            "Chromium (14 processes) is using 38 % CPU",
            "close the browser or its busy tabs",
        )
        apps = (
            app_usage("Chromium", 38.0, Category.BROWSER, 14),
            app_usage("llmtop", 3.2, Category.SELF),
            app_usage("llama", 95.0, Category.ENGINE),
            app_usage("slack", None),
        )
        app.post_message(ProbeSampled(sample(40.0, apps, Verdict.of([busy]), 3.2)))
        await wait_for(
            pilot,
            lambda: (
                panel.sample is not None and panel.sample.cost_ms == 2.5 and "NOISY" in panel.plain
            ),
        )
        await pilot.pause(0.1)
        text = panel.plain
        assert "NOISY" in text
        assert "Chromium (14 processes) is using 38 % CPU" in text and "close the browser" in text
        assert "🌐Chromium ×14" in text
        assert "llmtop itself: 3.2 %" in text and "engine:        95.0 %" in text
        top = text.split("top apps")[1].split("llmtop itself")[0]
        assert "llama" not in top and "llmtop" not in top  # shown apart, not in the top list
        assert "slack" in top and "warming up" in top
        assert re.search(r"CPU +40\.0 %", text)
        assert " 1▕" in text and "90" in text  # per-core bars with values
        assert "mem  4.0 GiB / 16.0 GiB (25 %)" in text


def test_system_text_many_cores_and_gpu() -> None:
    from llmtop.probes.gpu import GpuDevice, GpuSample
    from llmtop.tui.widgets.system_view import system_text

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
    text = system_text(system(12.5, tuple(float(i) for i in range(40))), gpu).plain
    assert "GPU0 42 % · 2.0 GiB / 141.0 GiB (NVML)" in text
    rows = [line for line in text.splitlines() if line[:3].strip().isdigit()]
    assert [r.split()[0] for r in rows] == ["0", "32"]  # one cell per core, 32 per row
    assert len(rows[0]) == 4 + 32 and len(rows[1]) == 4 + 8


async def test_stale_process_data_is_marked_with_its_age(tmp_path: Path) -> None:
    # A sample whose process read gave up keeps the last process data, marked stale with its
    # age; with no sample at all for a while, the border says how old the data is.
    async with panel_app(tmp_path) as (app, pilot, panel):
        good = dataclasses.replace(
            sample(10.0, (app_usage("slack", 12.0, Category.CHAT),), Verdict.of([]), 1.0),
            t_ns=1_000_000_000,
        )
        app.post_message(ProbeSampled(good))
        await wait_for(pilot, lambda: panel.sample is good, what="good sample drawn")
        # 2.5 s later the process read gave up: no process data in this sample
        gave_up = dataclasses.replace(good, t_ns=3_500_000_000, processes=None)
        app.post_message(ProbeSampled(gave_up))
        await wait_for(pilot, lambda: panel.sample is gave_up, what="stale sample drawn")
        await pilot.pause(0.1)
        text = panel.plain
        assert "stale: process data from 2.5 s ago" in text
        assert "slack" in text and "process probe failed" not in text
        shown = panel._shown_ns
        assert shown is not None
        assert panel.check_age(shown + 1_000_000_000) == 1.0 and panel.border_title == "machine"
        later = shown + int((STALE_AFTER_S + 2) * 1e9)
        assert panel.check_age(later) == STALE_AFTER_S + 2
        assert panel.border_title == f"machine — stale, {STALE_AFTER_S + 2:.0f} s old"
