"""Preflight: aggregation of a window of fixed ProbeSamples on medians, with exact values."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from llmtop.exitcodes import ExitCode
from llmtop.probes.catalogue import Category
from llmtop.probes.gpu import GpuSample
from llmtop.probes.preflight import (
    PreflightExit,
    aggregate,
    collect_samples,
    median_processes,
    run_preflight,
)
from llmtop.probes.processes import AppUsage, ProcessSample
from llmtop.probes.sampler import ProbeSample
from llmtop.probes.system import SystemSample
from llmtop.probes.verdict import Finding, Level, Thresholds, Verdict

SYS = SystemSample(
    cpu_percent=5.0,
    per_cpu=(5.0,) * 4,
    load_avg_per_core=0.1,
    mem_total=1000,
    mem_available=900,
    mem_percent=10.0,
    swap_total=0,
    swap_used=0,
    swap_percent=0.0,
    cpu_freq_mhz=None,
    cpu_freq_max_mhz=None,
    on_battery=None,
    logical_cpus=4,
)
NO_GPU = GpuSample(available=False, reason="no NVIDIA GPU found")


def app(name: str, cpu: float | None, cat: Category = Category.OTHER, n: int = 1) -> AppUsage:
    return AppUsage(name, cat, cpu, 100, n, tuple(range(n)), cat is Category.BROWSER)


def sample(
    cpu: float | None,
    apps: tuple[AppUsage, ...],
    *,
    self_cpu: float | None = 1.0,
    avail: int = 900,
    warm: bool = False,
    findings: tuple[Finding, ...] = (),
    broken: bool = False,
) -> ProbeSample:
    system = None if broken else dataclasses.replace(SYS, cpu_percent=cpu, mem_available=avail)
    procs = ProcessSample(apps, self_cpu, None, warm, len(apps), 4)
    return ProbeSample(0, "t", system, procs, NO_GPU, Verdict.of(findings), 0.1)


SELF = app("llmtop", 3.0, Category.SELF)
OLLAMA = app("ollama", 0.5, Category.INFERENCE)


def noisy_window() -> list[ProbeSample]:
    """A warm-up sample, then 5 samples (4 logical CPUs, 1000 bytes of memory)."""
    return [
        sample(None, (app("chromium", None, Category.BROWSER, 3),), warm=True),
        sample(
            20.0,
            (app("chromium", 40.0, Category.BROWSER, 3), app("indexer", 15.0), OLLAMA, SELF),
            self_cpu=4.0,
            avail=900,
        ),
        sample(
            30.0, (app("chromium", 38.0, Category.BROWSER, 2), OLLAMA, SELF), self_cpu=2.0, avail=80
        ),
        sample(
            10.0,
            (
                app("chromium", None, Category.BROWSER, 3),
                app("make", 120.0, Category.BUILD),
                app("indexer", 12.0),
                OLLAMA,
                SELF,
            ),
            self_cpu=6.0,
            avail=70,
        ),
        sample(
            40.0,
            (app("chromium", 2.0, Category.BROWSER, 3), app("indexer", 20.0), OLLAMA, SELF),
            self_cpu=8.0,
            avail=900,
        ),
        sample(
            35.0, (app("chromium", 50.0, Category.BROWSER, 3), OLLAMA, SELF), self_cpu=1.0, avail=60
        ),
    ]


def test_exit_codes_match_the_shared_ones() -> None:
    assert [(m.name, int(m)) for m in PreflightExit] == [
        ("QUIET", 0),
        ("NOISY", 1),
        ("CANNOT_CHECK", 2),
    ]
    assert (PreflightExit.QUIET, PreflightExit.NOISY, PreflightExit.CANNOT_CHECK) == (
        ExitCode.OK, ExitCode.NOISY, ExitCode.USAGE
    )


def test_findings_are_judged_on_the_medians() -> None:
    result = aggregate(noisy_window(), duration_s=2.5, interval_s=0.5)
    # The warm-up sample is dropped: 5 samples judged.
    # machine CPU median of 20, 30, 10, 40, 35 = 30; llmtop's own median of 4, 2, 6, 8, 1 = 4
    #   → background = 30 − 4 / 4 CPUs = 29.0 % > 25 → WARN
    # chromium: known readings 40, 38, 2, 50 (one None skipped) → median 39.0 > 10 → WARN
    # indexer: 15, absent(0), 12, 20, absent(0) → sorted 0 0 12 15 20 → median 12.0 → WARN
    # make: one burst of 120 in 5 samples → 0 0 0 0 120 → median 0 → no finding
    # memory available: 900 80 70 900 60 → median 80 of 1000 = 8.0 % < 10 → WARN
    # ollama (an inference engine; no engine pids were identified, so it may be the measured
    # one): INFO with its median 0.5, never "stop it"
    assert [(f.code, f.level, f.value, f.threshold) for f in result.findings] == [
        ("background-cpu", Level.WARN, 29.0, 25.0),
        ("browser-busy", Level.WARN, 39.0, 10.0),
        ("app-busy", Level.WARN, 12.0, 10.0),
        ("memory-low", Level.WARN, 8.0, 10.0),
        ("possible-engine", Level.INFO, 0.5, None),
    ]
    assert result.findings[1].message == "chromium (3 processes) is using 39 % CPU"
    assert result.findings[1].remedy == "close the browser or its busy tabs"
    assert result.quiet is False and result.exit_code is PreflightExit.NOISY
    assert result.verdict == "NOISY"
    assert result.samples == 5 and result.taken == 6
    assert result.background_cpu_median == 29.0
    # per sample (no engine pids: engine 0): 20 − 4/4 = 19, 30 − 2/4 = 29.5, 10 − 6/4 = 8.5,
    # 40 − 8/4 = 38, 35 − 1/4 = 34.75: the median's 29 hides a band of 8.5 to 38
    assert result.background_cpu_band == (8.5, 38.0)
    by_name = {a.app: a.cpu_percent for a in result.apps}
    assert by_name == {"chromium": 39.0, "indexer": 12.0, "make": 0.0, "llmtop": 3.0, "ollama": 0.5}
    assert [a.app for a in result.apps][:2] == ["chromium", "indexer"]


def test_config_thresholds_are_applied() -> None:
    lenient = Thresholds(background_cpu_warn=30.0, app_cpu_warn=40.0, mem_available_warn=5.0)
    result = aggregate(noisy_window(), lenient)
    # 29.0 ≤ 30, 39 ≤ 40, 12 ≤ 40, 8 % ≥ 5 %: only the INFO about ollama remains
    assert [(f.code, f.level) for f in result.findings] == [("possible-engine", Level.INFO)]
    assert result.quiet is True and result.exit_code is PreflightExit.QUIET


def test_extra_findings_join_the_verdict() -> None:
    quiet = [sample(None, (), warm=True), sample(5.0, (app("bash", 0.5),))]
    extra = Finding("other-models-loaded", Level.WARN, 4.9, 0.0, "GB loaded", "m", "r")
    assert aggregate(quiet).quiet is True
    result = aggregate(quiet, extra_findings=[extra])
    assert result.quiet is False and result.findings == (extra,)
    later = aggregate(quiet).with_findings([extra])
    assert later.quiet is False and later.exit_code is PreflightExit.NOISY


def test_probe_errors_are_counted_and_kept() -> None:
    err = Finding(
        "probe-error", Level.WARN, None, None, "", "gpu probe failed: RuntimeError: x", "r"
    )
    window = [sample(None, (), warm=True), sample(5.0, (), findings=(err,)), sample(5.0, ())]
    result = aggregate(window)
    assert [(f.code, f.message) for f in result.findings] == [
        ("probe-error", "gpu probe failed: RuntimeError: x (in 1 of 3 samples)")
    ]
    assert result.exit_code is PreflightExit.NOISY


def test_no_usable_sample_cannot_check() -> None:
    err = Finding("probe-error", Level.WARN, None, None, "", "system probe failed: OSError: y", "r")
    window = [
        sample(5.0, (), broken=True, findings=(err,)),
        sample(5.0, (), broken=True, findings=(err,)),
    ]
    result = aggregate(window)
    assert result.exit_code is PreflightExit.CANNOT_CHECK and result.verdict == "CANNOT CHECK"
    assert (
        result.error
        == "no usable probe sample out of 2: system probe failed: OSError: y (in 2 of 2 samples)"
    )
    assert result.samples == 0 and result.background_cpu_median is None
    only_warm = aggregate([sample(None, (), warm=True)])
    assert only_warm.error == "no usable probe sample out of 1: every sample was still warming up"


def test_median_processes_keeps_unknown_apart_from_zero() -> None:
    window = [
        ProcessSample((app("a", None),), 1.0, None, False, 1, 4),
        ProcessSample((app("a", None),), 1.0, None, False, 1, 4),
    ]
    merged = median_processes(window)
    assert merged.apps[0].cpu_percent is None and merged.apps[0].cpu_percent_machine is None
    assert merged.engine_cpu_percent is None


def test_to_dict_is_json_ready() -> None:
    result = aggregate(noisy_window(), duration_s=2.5, interval_s=0.5)
    data = json.loads(json.dumps(result.to_dict()))
    assert data["verdict"] == "NOISY" and data["exit_code"] == 1 and data["error"] is None
    assert data["samples"] == 5 and data["background_cpu_median"] == 29.0
    assert data["background_cpu_band"] == [8.5, 38.0]
    assert data["findings"][1] == {
        "code": "browser-busy",
        "level": "warn",
        "value": 39.0,
        "threshold": 10.0,
        "unit": "% CPU",
        "message": "chromium (3 processes) is using 39 % CPU",
        "remedy": "close the browser or its busy tabs",
    }
    assert data["apps"][0] == {
        "app": "chromium",
        "category": "browser",
        "cpu_percent_median": 39.0,
        "n_procs": 3,
        "pids": [0, 1, 2],  # app(..., 3): pids 0, 1, 2
    }
    assert data["thresholds"]["app_cpu_warn"] == 10.0


class ScriptedSampler:
    def __init__(self, samples: list[ProbeSample]) -> None:
        self.samples = list(samples)
        self.calls = 0

    def sample_once(self) -> ProbeSample:
        self.calls += 1
        return self.samples.pop(0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_run_preflight_samples_on_schedule_and_drops_the_first() -> None:
    window = noisy_window()
    # The first sample only primes CPU counters: even a non-warming one is not judged.
    primer = sample(99.0, (app("ghost", 500.0),))
    sampler = ScriptedSampler([primer] + window[1:])
    clock = FakeClock()
    result = run_preflight(2.5, 0.5, sampler=sampler, sleep=clock.sleep, clock=clock)
    assert sampler.calls == 6  # 1 primer + round(2.5 / 0.5) = 5
    assert clock.sleeps == [0.5] * 5
    assert result.duration_s == 2.5 and result.samples == 5 and result.taken == 6
    assert "ghost" not in {a.app for a in result.apps}
    assert result.background_cpu_median == 29.0


def test_collect_samples_rejects_bad_window() -> None:
    with pytest.raises(ValueError, match="must be > 0"):
        collect_samples(0.0, 0.5, sampler=ScriptedSampler([]))
    with pytest.raises(ValueError, match="must be > 0"):
        collect_samples(1.0, -1.0, sampler=ScriptedSampler([]))


def test_gpu_presence_comes_from_nvml_samples() -> None:
    result: Any = aggregate([sample(5.0, ())])
    assert result.gpu_present is None  # NVML absent: unknown, not "no GPU"
