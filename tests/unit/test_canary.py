"""The machine-speed canary, its cache, and the readings taken over each request."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from llmtop.probes.canary import Canary, CanaryCache, CanaryResult, check_against_last, slower_pct
from llmtop.probes.cgroup import Throttling, read_throttling
from llmtop.probes.gpu import GpuClocks, GpuProbe
from llmtop.probes.machine_speed import MachineReader, MachineReading, interval
from llmtop.sessions.analysis.machine import canary_medians
from llmtop.sessions.records.log import SessionLog, read_log
from tests.unit.test_probes_gpu import FakeNvml


def test_canary_times_its_three_parts_with_the_median_of_its_repeats():
    canary = Canary(repeats=2, buffer_bytes=1 << 20, threads=2)
    result = canary.run()
    assert result.repeats == 2 and result.threads == 2
    assert result.cpu_ms > 0 and result.mem_ms > 0 and result.simd_ms > 0
    assert result.total_ms == result.cpu_ms + result.mem_ms + result.simd_ms
    canary.close()
    with pytest.raises(ValueError):
        Canary(repeats=0)
    with pytest.raises(ValueError):
        Canary(threads=0)


def test_the_simd_part_leaves_no_blas_thread_spinning_after_it():
    # OpenBLAS's own workers spin for tens of ms after a call; the part keeps BLAS to the
    # calling thread, so once it returns the process burns (almost) no CPU. Measured: the
    # process's CPU seconds over 0.2 s of sleep after a run, against the 0.4 s two spinning
    # workers would burn; 0.05 s leaves room for the interpreter and the test runner.
    canary = Canary(repeats=1, buffer_bytes=1 << 20, threads=2)
    canary.run()
    before = sum(os.times()[:2])
    time.sleep(0.2)
    assert sum(os.times()[:2]) - before < 0.05
    canary.close()


def test_slower_pct():
    assert slower_pct(11.5, 10.0) == pytest.approx(15.0)  # 11.5 / 10 − 1
    assert slower_pct(9.0, 10.0) == pytest.approx(-10.0)
    with pytest.raises(ValueError):
        slower_pct(1.0, 0.0)


def test_cache_round_trip_and_bad_files(tmp_path: Path):
    cache = CanaryCache(tmp_path / "canary.json")
    assert cache.load() is None  # absent
    assert cache.store(3.0, 4.0, 2.0, "bench x.jsonl")
    got = cache.load()
    assert got is not None and (got.cpu_ms, got.mem_ms, got.simd_ms, got.source) == (
        3.0, 4.0, 2.0, "bench x.jsonl")
    assert got.total_ms == 9.0
    (tmp_path / "canary.json").write_text('{"format": 2, "cpu_ms": "fast"}')
    assert cache.load() is None  # malformed: treated as absent
    (tmp_path / "canary.json").write_text(
        '{"format": 1, "cpu_ms": 3.0, "mem_ms": 4.0, "at": "t", "source": "bench"}')
    assert cache.load() is None  # before the simd part: not comparable, treated as absent
    assert not CanaryCache(tmp_path / "canary.json" / "under-a-file").store(1.0, 1.0, 1.0, "x")


def test_preflight_check_compares_with_the_last_bench(tmp_path: Path):
    cache = CanaryCache(tmp_path / "canary.json")
    first = check_against_last(runs=1, cache=cache)
    assert first.last is None and first.slower is None
    assert first.sentence().endswith("no previous bench to compare with")
    # a "last bench" exactly half as slow as now: now is (now / half − 1) = 100 % slower
    half = first.now.total_ms / 2
    cache.store(half / 4, half / 2, half / 4, "bench")
    check = check_against_last(runs=3, cache=cache)
    assert check.slower == pytest.approx(slower_pct(check.now.total_ms, half))
    assert "than at your last bench" in check.sentence()
    assert json.dumps(check.to_dict())


def test_interval_between_two_readings():
    clocks = (GpuClocks(0, 1755, 1755, 2619, ("sw_thermal_slowdown",)),)
    before = MachineReading(0, (10.0, 1000.0), (2600.0,), Throttling(3, 5_000_000, 1), ())
    after = MachineReading(2_000_000_000, (12.0, 1010.0), (2400.0,), Throttling(7, 45_000_000, 1),
                           clocks)
    got = interval(before, after)
    # steal: (12 − 10) / (1010 − 1000) = 20 %; throttling: 40 ms over 4 periods; 2 s
    assert got.seconds == 2.0 and got.steal_percent == pytest.approx(20.0)
    assert (got.throttled_ms, got.throttled_periods) == (40.0, 4)
    assert got.freq_mhz == (2400.0,) and got.gpu == clocks
    # a cgroup more or less between the readings: the sums cannot be compared
    changed = MachineReading(1, None, (), Throttling(9, 1, 2), ())
    assert interval(before, changed).throttled_ms is None
    assert interval(before, changed).steal_percent is None
    # a steal counter that ran backwards (psutil #1210): absent, never a negative share
    backwards = MachineReading(2_000_000_000, (4.0, 1010.0), (2400.0,), None, ())
    assert interval(before, backwards).steal_percent is None


def test_reader_reads_this_machine_without_raising():
    reading = MachineReader(gpu=GpuProbe(nvml=FakeNvml(count=0))).read()
    assert reading.gpu == () and reading.t_ns > 0


class ClockNvml(FakeNvml):
    NVML_CLOCK_SM = 1

    def nvmlDeviceGetClockInfo(self, h: str, clock: int) -> int:
        return {0: 1755, 1: 1740, 2: 2619}[clock]


def test_gpu_clocks_and_throttle_reasons():
    (clocks,) = GpuProbe(nvml=ClockNvml()).clocks()
    # 0x24 = 0x04 (sw_power_cap) | 0x20 (sw_thermal_slowdown), from the older throttle call
    assert clocks == GpuClocks(0, 1755, 1740, 2619, ("sw_power_cap", "sw_thermal_slowdown"))


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_throttling_v2_sums_the_cgroup_and_its_parents(tmp_path: Path):
    root, proc = tmp_path / "cg2", tmp_path / "proc"
    write(root, {"cgroup.controllers": "cpu memory\n",
                 "cpu.stat": "usage_usec 1\nnr_throttled 0\nthrottled_usec 0\n",
                 "box/cpu.stat": "usage_usec 5\nnr_throttled 4\nthrottled_usec 1500\n",
                 "box/engine/cpu.stat": "nr_throttled 2\nthrottled_usec 500\n"})
    write(proc, {"self/cgroup": "0::/box\n", "77/cgroup": "0::/box/engine\n"})
    # self: box + root; engine 77: box/engine + box + root → 3 cgroups, box counted once
    got = read_throttling((77,), root, str(proc))
    assert got == Throttling(periods=6, throttled_ns=2_000_000, cgroups=3)


def test_throttling_v1_reads_the_cpu_hierarchy_in_ns(tmp_path: Path):
    root, proc = tmp_path / "cg1", tmp_path / "proc"
    write(root, {"cpu,cpuacct/cpu.stat": "nr_periods 9\nnr_throttled 0\nthrottled_time 0\n",
                 "cpu,cpuacct/pod/cpu.stat": "nr_periods 9\nnr_throttled 3\nthrottled_time 7000\n"})
    write(proc, {"self/cgroup": "4:memory:/x\n2:cpu,cpuacct:/pod\n"})
    assert read_throttling((), root, str(proc)) == Throttling(3, 7000, 2)
    assert read_throttling((), tmp_path / "none", str(proc)) is None


def test_canary_records_read_back_and_older_logs_have_none(tmp_path: Path):
    path = tmp_path / "bench.jsonl"
    log = SessionLog(path, {"kind": "bench"})
    canary = CanaryResult(3.0, 4.0, 1.0, threads=2).to_dict()
    log.write_raw({"type": "canary", "before_request": 2, "t_ns": 5, **canary})
    log.write_raw({"type": "canary", "before_request": 3, "cpu_ms": 5.0, "mem_ms": 6.0,
               "simd_ms": 2.0})
    log.write_raw({"type": "canary", "before_request": None, "cpu_ms": 9.0, "mem_ms": 9.0})
    log.close()
    run = read_log(path)
    assert [c.before_request for c in run.canaries] == [2, 3, None]
    assert run.canaries[0].total_ms == 8.0 and run.canaries[0].threads == 2
    assert run.canaries[2].repeats == 1 and run.canaries[2].simd_ms is None
    # medians of (3, 5), (4, 6) and (1, 2); the canary without a simd part (an older log's
    # kind) is left out
    assert canary_medians(run.canaries) == (4.0, 5.0, 1.5)
    assert canary_medians(run.canaries[2:]) is None
    old = tmp_path / "old.jsonl"
    SessionLog(old, {"kind": "bench"}).close()
    assert read_log(old).canaries == ()
