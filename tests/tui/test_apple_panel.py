"""The probe panel on an Apple Silicon Mac, on Linux: the sampler's GPU probe is AppleProbe fed
through its fakes (tests/unit/test_apple_probe.py: the recorded M1 Pro ioreg plist, the
recorded thermal/pmset/sysctl outputs, and zeus-apple-silicon replaying the M4 trace of
tests/fixtures/apple/m4_trace.json). Its figures, by hand from those fixtures:

* GPU busy 2 % ("Device Utilization %" = 2), 340983808 B held = 325.2 MiB;
* the rails over the trace's rows 1 → 2 (1.009 s): GPU (513117 − 501009) mJ
  = 12108 mJ → 12.0 W; CPU (209081 − 203027) = 6054 mJ → 6.0 W; DRAM (84036 − 82018) =
  2018 mJ → 2.0 W; ANE 5000 → 5000: 0.0 W;
* thermal pressure level 2: "serious".

The sample is the real ProbeSampler's, so its verdict is the sampler's own: "serious" is a
FAIL, so the machine is NOISY with heat named. At 80×24 the panel gives way to the one-line
badge, which carries them in a few words; at 160×45 the panel shows the finding, the GPU's
line, the rails and the thermal state.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from textual.pilot import Pilot

from llmtop.probes.apple import AppleProbe
from llmtop.probes.gpu import GpuSample
from llmtop.probes.sampler import ProbeSample, ProbeSampler
from llmtop.probes.verdict import Verdict
from llmtop.tui.app import LlmtopApp
from llmtop.tui.widgets.machine_badge import badge_text
from llmtop.tui.widgets.system_view import system_text
from tests.unit.test_apple_energy import fake_library, m4_rows
from tests.unit.test_apple_probe import MAC, replay

from .fakes import MS, SENT_NS, busy_apps, machine_sample, system_sample, wait_for
from .test_fake_engine import drawn, send
from .test_snapshots import RunBefore, Snap, in_tmp_dir, main_app, show_probe

__all__ = ["in_tmp_dir"]  # the snapshot module's autouse fixture, used here too


def primed_probe() -> AppleProbe:
    """AppleProbe on its fakes after two readings (rows 0 and 1 of the M4 trace); its next
    reading takes row 2, 1.009 s after row 1."""
    stamps, rows = m4_rows()
    at = {"i": 0}
    probe = AppleProbe(lib=fake_library(rows), run=replay(MAC), clock=lambda: stamps[at["i"]])
    probe.sample()  # row 0: the first reading only starts the window
    at["i"] = 1
    probe.sample()
    at["i"] = 2
    return probe


def apple_gpu() -> GpuSample:
    """The adapter's reading over rows 1 → 2 of the M4 trace."""
    return primed_probe().sample()


class Fixed:
    """A system or process probe that gives one fixed sample (tests/tui/fakes.py's)."""

    def __init__(self, value: object) -> None:
        self.value = value

    def sample(self) -> object:
        return self.value


def apple_sample(t_ns: int) -> ProbeSample:
    """One sample of the real ProbeSampler whose GPU probe is AppleProbe fed its fakes
    (`primed_probe`: the reading over rows 1 → 2 of the M4 trace) and whose system and
    processes are the fakes' fixed ones: the verdict is the sampler's own, so the recorded
    thermal level 2 is a FAIL (thermal-pressure) above Chromium's WARN. Its stamp is `t_ns`,
    its cost the fakes' 2.5 ms."""
    probe = primed_probe()
    base = machine_sample(t_ns, 40.0, busy_apps(), Verdict.of([]), 3.2)
    sampler = ProbeSampler(system_probe=Fixed(base.system),  # type: ignore[arg-type]
                           process_probe=Fixed(base.processes),  # type: ignore[arg-type]
                           gpu_probe=probe, clock=lambda: t_ns)
    return replace(sampler.sample_once(), wall_time=base.wall_time, cost_ms=base.cost_ms)


def test_panel_lines_carry_gpu_power_and_thermal_state() -> None:
    lines = system_text(system_sample(40.0), apple_gpu()).plain.splitlines()
    assert lines[-3:] == [
        "GPU Apple 2 % · 325.2 MiB · 12.0 W (AGX)",
        "power CPU 6.0 GPU 12.0 ANE 0.0 DRAM 2.0 W",
        "thermal serious",
    ]


def test_badge_carries_gpu_power_and_thermal_state() -> None:
    # NOISY: the thermal FAIL is the worst finding (Chromium's 38 % is a WARN), and its
    # message says the thermal state once, so the GPU's figures fit in 80 columns
    text = badge_text(apple_sample(SENT_NS)).plain
    assert text == (" NOISY  thermal pressure serious: clocks cut · CPU "
                    "40.0 % · GPU 2 % 12.0 W")
    assert len(text) <= 80
    quiet = replace(apple_sample(SENT_NS), verdict=Verdict.of([]))
    assert badge_text(quiet).plain == " QUIET  CPU 40.0 % · GPU 2 % 12.0 W · thermal serious"


def after_a_request_with_apple_figures() -> RunBefore:
    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, LlmtopApp)
        await send(pilot, app, "hello")
        await wait_for(pilot, lambda: drawn(app), what="request done and drawn")
        await show_probe(pilot, app, apple_sample(SENT_NS + 100 * MS))
        await wait_for(pilot, lambda: drawn(app), what="the sample drawn")

    return run_before


SIZES = [(80, 24), (160, 45)]


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_main_screen_with_apple_figures(
    snap_compare: Snap, monkeypatch: pytest.MonkeyPatch, size: tuple[int, int]
) -> None:
    """80×24: the badge "NOISY thermal pressure serious … · GPU 2 % 12.0 W"; 160×45: the
    panel's finding, GPU line, its rails and "thermal serious"."""
    app = main_app(monkeypatch)
    assert snap_compare(app, terminal_size=size, run_before=after_a_request_with_apple_figures())
