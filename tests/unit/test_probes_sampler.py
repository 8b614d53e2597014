"""ProbeSampler: synchronous samples, the thread loop, errors that must not kill it, JSON."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from llmtop.probes.catalogue import Category
from llmtop.probes.gpu import GpuSample
from llmtop.probes.processes import AppUsage, ProcessSample
from llmtop.probes.sampler import ProbeSample, ProbeSampler
from llmtop.probes.system import SystemSample
from llmtop.probes.verdict import Level

SYSTEM = SystemSample(
    cpu_percent=10.0,
    per_cpu=(10.0, 10.0),
    load_avg_per_core=0.2,
    mem_total=8 * 2**30,
    mem_available=6 * 2**30,
    mem_percent=25.0,
    swap_total=0,
    swap_used=0,
    swap_percent=0.0,
    cpu_freq_mhz=None,
    cpu_freq_max_mhz=None,
    on_battery=None,
    logical_cpus=2,
)


class StubSystem:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def sample(self) -> SystemSample:
        if self.fail:
            raise RuntimeError("boom")
        return SYSTEM


class StubProcesses:
    def __init__(self, n_apps: int = 3) -> None:
        self.apps = tuple(
            AppUsage(f"app{i}", Category.OTHER, i / 10, 1000 * i, 1, (i,), False, i / 20)
            for i in range(n_apps, 0, -1)
        )

    def sample(self) -> ProcessSample:
        return ProcessSample(self.apps, 1.0, None, False, len(self.apps), 2)


class StubGpu:
    def sample(self) -> GpuSample:
        return GpuSample(available=False, reason="no NVIDIA GPU found")


def make(interval_s: float = 0.05, **kw: Any) -> ProbeSampler:
    return ProbeSampler(
        interval_s,
        kw.pop("on_sample", None),
        system_probe=kw.pop("system_probe", StubSystem()),
        process_probe=kw.pop("process_probe", StubProcesses()),
        gpu_probe=StubGpu(),  # type: ignore[arg-type]
        **kw,
    )


class Collector:
    """Collects samples from the sampler thread; wait(n) blocks until n have arrived."""

    def __init__(self) -> None:
        self.samples: list[ProbeSample] = []
        self._cond = threading.Condition()

    def __call__(self, sample: ProbeSample) -> None:
        with self._cond:
            self.samples.append(sample)
            self._cond.notify_all()

    def wait(self, n: int, timeout_s: float = 10.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.samples) >= n, timeout_s)


def test_sample_once_and_json_ready_dict() -> None:
    sampler = make(process_probe=StubProcesses(n_apps=30))
    sample = sampler.sample_once()
    assert sampler.latest is sample
    assert sample.verdict.quiet is True and sample.cost_ms >= 0.0
    d = sample.to_dict(max_apps=5)
    assert json.loads(json.dumps(d)) == d  # plain JSON types only
    assert [a["app"] for a in d["processes"]["apps"]] == [
        "app30",
        "app29",
        "app28",
        "app27",
        "app26",
    ]
    assert d["processes"]["apps_omitted"] == 25
    assert d["processes"]["apps"][0]["category"] == "other"
    assert d["gpu"] == {
        "available": False,
        "reason": "no NVIDIA GPU found",
        "source": "nvml",
        "driver_version": None,
        "devices": [],
    }
    assert d["system"]["per_cpu"] == [10.0, 10.0]
    assert len(sample.to_dict(max_apps=None)["processes"]["apps"]) == 30


def test_failing_probe_becomes_a_finding_and_the_loop_goes_on() -> None:
    got = Collector()
    sampler = make(on_sample=got, system_probe=StubSystem(fail=True))
    sampler.start()
    try:
        assert got.wait(3)
    finally:
        sampler.stop()
    sample = got.samples[0]
    assert sample.system is None and sample.processes is not None
    assert sample.verdict.quiet is False
    assert [(f.code, f.level) for f in sample.verdict.findings] == [("probe-error", Level.WARN)]
    assert "system probe failed: RuntimeError: boom" in sample.verdict.findings[0].message
    json.dumps(sample.to_dict())


def test_failing_callback_does_not_stop_sampling() -> None:
    calls: list[int] = []
    done = threading.Event()

    def bad(sample: ProbeSample) -> None:
        calls.append(1)
        if len(calls) >= 3:
            done.set()
        raise ValueError("callback bug")

    sampler = make(on_sample=bad)
    sampler.start()
    try:
        assert done.wait(10)
    finally:
        sampler.stop()
    assert not sampler.running


def test_samples_are_ordered_and_stop_joins() -> None:
    got = Collector()
    sampler = make(on_sample=got)
    sampler.start()
    sampler.start()  # no second thread
    try:
        assert got.wait(3)
    finally:
        sampler.stop()
    assert not sampler.running
    stamps = [s.t_ns for s in got.samples]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert sampler.latest is got.samples[-1]


def test_set_interval_takes_effect_without_waiting_out_the_old_one() -> None:
    got = Collector()
    sampler = make(interval_s=60.0, on_sample=got)
    sampler.start()
    try:
        assert got.wait(1)
        sampler.set_interval(0.02)
        assert sampler.interval_s == 0.02
        assert got.wait(3, timeout_s=10.0)  # would take 60 s without the wake-up
    finally:
        sampler.stop()


def test_stop_does_not_wait_out_a_long_interval() -> None:
    got = Collector()
    sampler = make(interval_s=60.0, on_sample=got)
    sampler.start()
    assert got.wait(1)
    sampler.stop(timeout_s=5.0)
    assert not sampler.running


@pytest.mark.parametrize("bad", [0, -1.0])
def test_interval_must_be_positive(bad: float) -> None:
    with pytest.raises(ValueError, match="interval_s must be > 0"):
        make(interval_s=bad)
    sampler = make()
    with pytest.raises(ValueError):
        sampler.set_interval(bad)


def test_a_logged_sample_keeps_3_decimals_and_8_pids_per_app() -> None:
    class Kernel(StubProcesses):
        def __init__(self) -> None:
            # 56 kernel threads at 1/3 % of a core: the whole count stays, 8 pids are listed
            self.apps = (AppUsage("kernel threads", Category.OTHER, 1 / 3, 0, 56,
                                  tuple(range(3, 59)), False, 1 / 6),)

    d = make(process_probe=Kernel()).sample_once().to_dict()
    (app,) = d["processes"]["apps"]
    assert app["pids"] == [3, 4, 5, 6, 7, 8, 9, 10] and app["n_procs"] == 56
    assert app["cpu_percent"] == 0.333 and app["cpu_percent_machine"] == 0.167


def test_idle_apps_past_the_first_few_are_not_logged() -> None:
    # 12 apps sorted by CPU: app12..app5 used CPU, the last 4 none. max_apps 20 keeps the 8
    # busy ones; of the 4 idle ones only those inside the first MIN_LOGGED_APPS (5) positions
    # would stay, and all 4 are at positions 9-12: 8 logged, 4 omitted.
    class Mixed(StubProcesses):
        def __init__(self) -> None:
            self.apps = tuple(
                AppUsage(f"app{i}", Category.OTHER, float(i) if i > 4 else 0.0, 1000, 1,
                         (i,), False, None) for i in range(12, 0, -1))

    d = make(process_probe=Mixed()).sample_once().to_dict()
    assert [a["app"] for a in d["processes"]["apps"]] == [f"app{i}" for i in range(12, 4, -1)]
    assert d["processes"]["apps_omitted"] == 4
    # a quiet machine whose apps all idle still lists its first 5
    class Idle(StubProcesses):
        def __init__(self) -> None:
            self.apps = tuple(AppUsage(f"idle{i}", Category.OTHER, 0.0, 1000, 1, (i,), False,
                                       0.0) for i in range(7))

    d = make(process_probe=Idle()).sample_once().to_dict()
    assert [a["app"] for a in d["processes"]["apps"]] == [f"idle{i}" for i in range(5)]
    assert d["processes"]["apps_omitted"] == 2
