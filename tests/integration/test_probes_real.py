"""Real processes: a CPU-burning child must show up as its own busy app, unknown at first.

The child is `python -c "while True: pass"` started through a symlink named `probeburner`,
so its process name (Linux comm, macOS p_comm) is distinctive and it groups as its own app.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmtop.probes.catalogue import Category
from llmtop.probes.processes import AppUsage, ProcessProbe, ProcessSample
from llmtop.probes.sampler import ProbeSample, ProbeSampler
from llmtop.probes.system import SystemProbe
from llmtop.probes.verdict import Level, evaluate

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

NAME = "probeburner"


@pytest.fixture
def burner(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A child process burning one core, named NAME; killed and reaped afterwards."""
    link = tmp_path / NAME
    try:
        link.symlink_to(os.path.realpath(sys.executable))
    except (OSError, NotImplementedError):
        pytest.skip("symlinks unavailable: cannot give the child a distinctive name")
    child = subprocess.Popen([str(link), "-c", "while True: pass"], stdin=subprocess.DEVNULL)
    try:
        yield child
    finally:
        child.kill()
        child.wait(timeout=10)


def find(sample: ProcessSample, pid: int) -> AppUsage:
    matches = [a for a in sample.apps if pid in a.pids]
    assert len(matches) == 1, f"pid {pid} not in exactly one app"
    return matches[0]


def test_burning_child_is_a_busy_non_browser_app(burner: subprocess.Popen[bytes]) -> None:
    probe = ProcessProbe()
    first = probe.sample()
    assert first.warming_up is True
    assert find(first, burner.pid).cpu_percent is None  # warming up: unknown, not 0.0

    time.sleep(0.5)
    second = probe.sample()
    app = find(second, burner.pid)
    assert app.app == NAME and app.category is Category.OTHER
    assert app.is_browser is False and app.n_procs == 1
    assert app.cpu_percent is not None and app.cpu_percent > 50.0  # it burns one core
    assert app in second.apps[:3]
    assert second.self_cpu_percent is not None

    system = SystemProbe()
    system.sample()
    time.sleep(0.2)
    third = probe.sample()
    verdict = evaluate(system.sample(), third)
    busy = [f for f in verdict.findings if f.code == "app-busy" and NAME in f.message]
    assert len(busy) == 1 and busy[0].level in (Level.WARN, Level.FAIL)
    assert verdict.quiet is False


def test_process_started_after_first_sample_is_unknown_then_known(tmp_path: Path) -> None:
    probe = ProcessProbe()
    probe.sample()
    link = tmp_path / NAME
    link.symlink_to(os.path.realpath(sys.executable))
    child = subprocess.Popen([str(link), "-c", "while True: pass"], stdin=subprocess.DEVNULL)
    try:
        second = probe.sample()
        assert second.warming_up is False
        assert find(second, child.pid).cpu_percent is None
        time.sleep(0.5)
        assert (find(probe.sample(), child.pid).cpu_percent or 0.0) > 50.0
    finally:
        child.kill()
        child.wait(timeout=10)


def test_engine_pids_are_accounted_apart(burner: subprocess.Popen[bytes]) -> None:
    probe = ProcessProbe(engine_pids=lambda: {burner.pid})
    probe.sample()
    time.sleep(0.5)
    sample = probe.sample()
    assert find(sample, burner.pid).category is Category.ENGINE
    assert sample.engine_cpu_percent is not None and sample.engine_cpu_percent > 50.0
    system = SystemProbe()
    system.sample()
    time.sleep(0.2)
    verdict = evaluate(system.sample(), probe.sample())
    assert not [f for f in verdict.findings if NAME in f.message]


def test_sampler_thread_on_the_real_machine() -> None:
    samples: list[ProbeSample] = []
    sampler = ProbeSampler(interval_s=0.1, on_sample=samples.append)
    sampler.start()
    try:
        deadline = time.monotonic() + 20
        while len(samples) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        sampler.stop()
    assert len(samples) >= 3 and not sampler.running
    first, last = samples[0], samples[-1]
    assert first.system is not None and first.system.cpu_percent is None
    assert last.system is not None and last.system.cpu_percent is not None
    assert last.processes is not None and last.processes.self_cpu_percent is not None
    assert last.gpu is not None and last.gpu.source == "nvml"
    assert not [f for f in last.verdict.findings if f.code == "probe-error"]
    json.dumps(last.to_dict())
