"""The probe panel with an AMD card, and the offload finding beside the request, snapshotted:
the GPU probe reads a fake amdgpu tree (tests/unit/test_gpu_sysfs.py's `amd_card`: the files
and units the kernel documents) through GpuProbe's `drm_root`, the folder it reads instead of
/sys/class/drm; the same tree mounted over /sys/class in a private mount namespace gives the
real CLI (test_gpu_sysfs.py) and the TUI's own default sampler (the last test here) the same
figures. By hand from the tree:

* busy 37 % (gpu_busy_percent "37"), VRAM 4.0 GiB of 24.0 GiB (mem_info_vram_used
  4294967296 B, mem_info_vram_total 25769803776 B), 85 W (power1_average 85000000 µW):
  "card1 AMD 37 % · 4.0 GiB / 24.0 GiB · 85 W (amdgpu)";
* the engine claims all 4 GB of the model in VRAM (/api/ps size_vram = size) while its
  processes use 2.0 and 2.2 cores in the two samples of the request: median 2.1 cores ≥ 2,
  the fail "its processes used 2.1 cores of CPU during the request, GPU busy 37 %".
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from llmtop.probes.catalogue import Category
from llmtop.probes.gpu import GpuProbe
from llmtop.probes.sampler import ProbeSample
from llmtop.probes.verdict import Verdict
from llmtop.tui.app import LlmtopApp
from llmtop.tui.messages import ProbeSampled
from llmtop.tui.widgets.system_view import gpu_line
from tests.unit.test_gpu_sysfs import amd_card, needs_namespace

from .fakes import MS, SENT_NS, app_usage, busy_apps, fake_connection, machine_sample, wait_for
from .test_fake_engine import build, drawn, send
from .test_offload_tui import ClaimingEngine
from .test_snapshots import Snap, in_tmp_dir, seeded, show_probe

__all__ = ["in_tmp_dir"]  # the snapshot module's autouse fixture, used here too

AMD_LINE = "card1 AMD 37 % · 4.0 GiB / 24.0 GiB · 85 W (amdgpu)"


def amd_sample(tree: Path, t_ms: float, engine_cpu: float) -> ProbeSample:
    """A QUIET sample `t_ms` after the send: the busy apps, the measured engine at
    `engine_cpu` % of a core, and the GPU probe's reading of the fake tree (NVML: a library
    that has nothing, so only the kernel's files give a GPU)."""
    apps = (*busy_apps()[:2], app_usage("ollama", engine_cpu, Category.ENGINE))
    base = machine_sample(SENT_NS + int(t_ms * MS), 40.0, apps, Verdict.of([]), 3.2)
    gpu = GpuProbe(nvml=object(), drm_root=tree).sample()
    assert base.processes is not None
    processes = replace(base.processes, engine_cpu_percent=engine_cpu)  # the panel's "engine:"
    return ProbeSample(t_ns=base.t_ns, wall_time=base.wall_time, system=base.system,
                       processes=processes, gpu=gpu, verdict=base.verdict,
                       cost_ms=base.cost_ms)


def test_the_fake_card_reads_as_the_panel_line(tmp_path: Path) -> None:
    amd_card(tmp_path / "drm")
    sample = amd_sample(tmp_path / "drm", 0.0, 50.0)
    assert sample.gpu is not None
    assert [gpu_line(d) for d in sample.gpu.devices] == [AMD_LINE]


def test_main_screen_with_an_amd_card_and_the_offload_finding(
        snap_compare: Snap, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The panel's GPU line "card1 AMD 37 % · 4.0 GiB / 24.0 GiB · 85 W (amdgpu)" and, under
    the request's figures, "⚠ GPU: the engine says the model is 100 % on the GPU, but its
    processes used 2.1 cores of CPU during the request, GPU busy 37 %, …" with its causes."""
    tree = tmp_path / "tree"
    amd_card(tree)
    monkeypatch.setattr("llmtop.sessions.measure.request.perf_counter_ns", lambda: SENT_NS)
    app, _ = build(Path(), fake_connection(ClaimingEngine()))

    async def run_before(pilot: Pilot[Any]) -> None:
        assert isinstance(app, LlmtopApp)
        await send(pilot, app, "hello")
        await wait_for(pilot, lambda: drawn(app), what="request done and drawn")
        live = app.main_screen.live
        assert live is not None
        app.post_message(ProbeSampled(amd_sample(tree, 100.0, 200.0)))
        end = amd_sample(tree, 900.0, 220.0)
        app.post_message(ProbeSampled(end, live))
        await wait_for(pilot, lambda: live.offload is not None, what="the offload finding")
        await show_probe(pilot, app, end)
        await wait_for(pilot, lambda: drawn(app), what="the finding drawn")

    assert snap_compare(seeded(app), terminal_size=(160, 45), run_before=run_before)


@needs_namespace
def test_the_default_sampler_reads_the_card_over_sys_class(tmp_path: Path) -> None:
    """No seam: the TUI's own sampler (ProbeSampler with its default probes) in a process
    whose /sys/class is the fake tree's (unshare -m), its sample drawn as the panel draws
    it: the AMD card's line is there."""
    amd_card(tmp_path / "class" / "drm")
    code = ("from llmtop.probes.sampler import ProbeSampler\n"
            "from llmtop.tui.widgets.system_view import system_text\n"
            "s = ProbeSampler().sample_once()\n"
            "print(system_text(s.system, s.gpu).plain)\n")
    script = (f"mount --bind {tmp_path / 'class'} /sys/class && exec timeout -s KILL 60 "
              f"{sys.executable} -c '{code}'")
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                          text=True, check=False, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert AMD_LINE in done.stdout.splitlines()
