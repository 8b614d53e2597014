"""Probes on machines unlike the developer's: missing sensors, pid 0, a process stuck in the
kernel, and the `[engine] pids` override in the config file."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from llmtop.probes import processes as procmod
from llmtop.probes.config import ConfigError, engine_pids_from_mapping, load_engine_pids
from llmtop.probes.processes import ProbeTimeout, ProcessProbe
from llmtop.probes.sampler import ProbeSampler
from llmtop.probes.system import SystemProbe
from llmtop.probes.verdict import evaluate

# --- optional readings: None, 0, empty, or an exception → n/a, no crash, no finding


def boom() -> Any:
    raise RuntimeError("sensor driver fell over")


Freq = SimpleNamespace


@pytest.mark.parametrize(
    ("freq", "battery", "temps"),
    [
        (lambda: None, lambda: None, dict),
        (lambda: Freq(current=0.0, min=0.0, max=0.0), lambda: Freq(power_plugged=None), dict),
        (boom, boom, boom),
        (lambda: Freq(current=None, max=None), lambda: Freq(), lambda: {"acpi": [Freq(current=0.0, high=None)]}),
        (lambda: Freq(current=-1.0, max=float("nan")), lambda: 0, lambda: {"x": []}),
    ],
    ids=["none", "zeros", "raise", "missing-fields", "negative-nan"],
)
def test_optional_readings_are_na(
    monkeypatch: pytest.MonkeyPatch, freq: Any, battery: Any, temps: Any
) -> None:
    monkeypatch.setattr(psutil, "cpu_freq", freq)
    monkeypatch.setattr(psutil, "sensors_battery", battery, raising=False)
    monkeypatch.setattr(psutil, "sensors_temperatures", temps, raising=False)
    probe = SystemProbe(None)
    probe.sample()
    s = probe.sample()
    assert (s.cpu_freq_mhz, s.cpu_freq_max_mhz, s.on_battery) == (None, None, None)
    assert (s.temperature_c, s.temperature_high_c) == (None, None)
    codes = {f.code for f in evaluate(s, procmod.group([])).findings}
    assert not codes & {"cpu-slow", "on-battery", "hot"}


def test_missing_sensor_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("cpu_freq", "sensors_battery", "sensors_temperatures"):
        monkeypatch.delattr(psutil, name, raising=False)
    s = SystemProbe(None).sample()
    assert (s.cpu_freq_mhz, s.on_battery, s.temperature_c) == (None, None, None)


# --- pid 0 and a stuck process, over a fake process table


class Proc:
    """A psutil.Process stand-in; `gate`: name() blocks until it is set (a process stuck in
    the kernel makes psutil's read of /proc/<pid>/cmdline block)."""

    def __init__(self, pid: int, name: str, cpu: float = 0.0, gate: threading.Event | None = None):
        self.pid, self._name, self._cpu, self.gate = pid, name, cpu, gate

    def oneshot(self) -> Any:
        import contextlib

        return contextlib.nullcontext()

    def name(self) -> str:
        if self.gate is not None:
            self.gate.wait()
        return self._name

    def exe(self) -> str:
        return ""

    def cmdline(self) -> list[str]:
        return [self._name]

    def cpu_percent(self, interval: float | None = None) -> float:
        return self._cpu

    def memory_info(self) -> Any:
        return SimpleNamespace(rss=1 << 20)

    def is_running(self) -> bool:
        return True

    def ppid(self) -> int:
        return 1


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> dict[int, Proc]:
    procs: dict[int, Proc] = {}

    def make(pid: int) -> Proc:
        if pid not in procs:
            raise psutil.NoSuchProcess(pid)
        return procs[pid]

    monkeypatch.setattr(psutil, "pids", lambda: sorted(procs))
    monkeypatch.setattr(psutil, "Process", make)
    return procs


def test_pid_0_is_never_an_application(table: dict[int, Proc]) -> None:
    # Windows reports the idle time as "System Idle Process", pid 0, at ~100 % per core.
    table[0] = Proc(0, "System Idle Process", 1600.0)
    table[7] = Proc(7, "bash", 1.0)
    probe = ProcessProbe(self_pids=set())
    probe.sample()
    assert [a.app for a in probe.sample().apps] == ["bash"]


def test_stuck_process_read_gives_up_then_is_skipped(table: dict[int, Proc]) -> None:
    gate = threading.Event()
    table[7] = Proc(7, "bash", 1.0)
    probe = ProcessProbe(self_pids=set(), read_timeout_s=0.2)
    probe.sample()
    table[66] = Proc(66, "stuck", gate=gate)  # appears, and reading its name hangs
    try:
        with pytest.raises(ProbeTimeout, match="reading process 66 took over 0.2 s"):
            probe.sample()
        assert probe.stuck == {66}
        later = probe.sample()  # pid 66 is skipped: the probe works again
        assert [(a.app, a.cpu_percent) for a in later.apps] == [("bash", 1.0)]
    finally:
        gate.set()  # let the abandoned worker thread finish


def test_sampler_reports_a_stuck_probe_and_quits_fast(table: dict[int, Proc]) -> None:
    gate = threading.Event()
    table[66] = Proc(66, "stuck", gate=gate)
    probe = ProcessProbe(self_pids=set(), read_timeout_s=0.2)
    sampler = ProbeSampler(0.05, process_probe=probe, gpu=False, system_probe=SystemProbe(None))
    try:
        sample = sampler.sample_once()
        assert sample.processes is None
        errors = [f for f in sample.verdict.findings if f.code == "probe-error"]
        assert len(errors) == 1 and "process 66" in errors[0].message
        # A probe blocked for good must not hold up quitting: stop() waits at most 0.5 s.
        blocked = threading.Event()

        class Hung:
            def sample(self) -> Any:
                blocked.set()
                gate.wait()

        hung = ProbeSampler(0.05, process_probe=Hung(), gpu=False, system_probe=SystemProbe(None))  # type: ignore[arg-type]
        hung.start()
        assert blocked.wait(5.0)
        t0 = time.perf_counter_ns()
        hung.stop()
        assert (time.perf_counter_ns() - t0) / 1e9 < 1.0
    finally:
        gate.set()


# --- [engine] pids in the config file


@pytest.mark.parametrize(
    ("doc", "pids"),
    [({}, ()), ({"engine": {}}, ()), ({"engine": {"pids": [900, 901]}}, (900, 901))],
)
def test_engine_pids_from_config(doc: dict[str, Any], pids: tuple[int, ...]) -> None:
    assert engine_pids_from_mapping(doc, "c.toml") == pids


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"engine": {"pids": 900}}, "c.toml: [engine] pids: expected a list of positive integers, got 900"),
        ({"engine": {"pids": [0]}}, "c.toml: [engine] pids: expected a list of positive integers, got [0]"),
        ({"engine": {"pids": [True]}}, "c.toml: [engine] pids: expected a list of positive integers, got [True]"),
        ({"engine": {"pid": [1]}}, "c.toml: [engine] pid: unknown key (known keys: pids)"),
        ({"engine": 3}, "c.toml: 'engine' must be a table, got int"),
    ],
)
def test_engine_pids_errors(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        engine_pids_from_mapping(doc, "c.toml")
    assert str(err.value) == message


def test_engine_pids_file_with_thresholds(tmp_path: Path) -> None:
    from llmtop.probes.config import load_thresholds

    path = tmp_path / "config.toml"
    path.write_text("[thresholds]\napp_cpu_warn = 5\n\n[engine]\npids = [4242]\n")
    assert load_engine_pids(path) == (4242,)
    assert load_thresholds(path).app_cpu_warn == 5.0  # the [engine] table is not an error there
