"""Container limits from fake cgroup trees (v1 and v2): parsing, nesting, usage against the
limits, and what SystemProbe and the environment record make of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtop.probes.cgroup import (
    CgroupLimits,
    CgroupMeter,
    parse_cfs,
    parse_cpu_max,
    parse_memory_limit,
    read_limits,
)
from llmtop.probes.system import SystemProbe, cpu_capacity
from llmtop.sessions.runners.environment import container_record

GIB = 1 << 30


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("200000 100000", 2.0), ("50000 100000", 0.5), ("max 100000", None), ("150000", 1.5)],
)
def test_parse_cpu_max(text: str, cpus: float | None) -> None:
    assert parse_cpu_max(text) == cpus


@pytest.mark.parametrize(
    ("quota", "period", "cpus"), [("-1", "100000", None), ("150000\n", "100000\n", 1.5)]
)
def test_parse_cfs(quota: str, period: str, cpus: float | None) -> None:
    assert parse_cfs(quota, period) == cpus


@pytest.mark.parametrize(
    ("text", "limit"),
    [
        ("max\n", None),
        ("4294967296\n", 4 * GIB),
        ("9223372036854771712\n", None),  # v1's "no limit": LONG_MAX rounded down to a page
    ],
)
def test_parse_memory_limit(text: str, limit: int | None) -> None:
    assert parse_memory_limit(text) == limit


@pytest.mark.parametrize("bad", ["", "a b c", "0 100000", "x 100000"])
def test_parse_cpu_max_rejects_garbage(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_cpu_max(bad)


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def v2_tree(tmp_path: Path) -> tuple[Path, str]:
    """cgroup v2: the parent allows 4 CPUs and no memory limit, the container (docker/abc)
    2 CPUs and 4 GiB: the tightest of each applies."""
    root = tmp_path / "cg2"
    write(root, {
        "cgroup.controllers": "cpu memory\n",
        "cpu.max": "max 100000\n",
        "docker/cpu.max": "400000 100000\n",
        "docker/memory.max": "max\n",
        "docker/abc/cpu.max": "200000 100000\n",
        "docker/abc/memory.max": "4294967296\n",
        "docker/abc/cpu.stat": "usage_usec 1000000\nuser_usec 900000\n",
        "docker/abc/memory.current": str(3 * GIB) + "\n",
        "docker/abc/memory.stat": f"anon 1\ninactive_file {GIB}\n",
    })
    (tmp_path / "self2").write_text("0::/docker/abc\n")
    return root, str(tmp_path / "self2")


def v1_tree(tmp_path: Path) -> tuple[Path, str]:
    """cgroup v1 with cpu and cpuacct mounted together: 1.5 CPUs, 512 MiB."""
    root = tmp_path / "cg1"
    write(root, {
        "cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
        "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        "cpu,cpuacct/pod/cpu.cfs_quota_us": "150000\n",
        "cpu,cpuacct/pod/cpu.cfs_period_us": "100000\n",
        "cpu,cpuacct/pod/cpuacct.usage": "5000000000\n",
        "memory/memory.limit_in_bytes": "9223372036854771712\n",
        "memory/pod/memory.limit_in_bytes": str(512 << 20) + "\n",
        "memory/pod/memory.usage_in_bytes": str(300 << 20) + "\n",
        "memory/pod/memory.stat": f"cache 5\ntotal_inactive_file {100 << 20}\n",
    })
    (tmp_path / "self1").write_text("4:memory:/pod\n2:cpu,cpuacct:/pod\n1:name=systemd:/\n")
    return root, str(tmp_path / "self1")


def test_v2_tightest_limits_and_usage(tmp_path: Path) -> None:
    root, own = v2_tree(tmp_path)
    limits = read_limits(root, own)
    assert limits is not None
    assert (limits.version, limits.cpus, limits.memory_bytes) == (2, 2.0, 4 * GIB)
    clock = iter([0, 1_000_000_000])  # one second between the two readings
    meter = CgroupMeter(limits, clock_ns=lambda: next(clock))
    assert meter.cpu_percent() is None  # first reading only primes
    write(root, {"docker/abc/cpu.stat": "usage_usec 2500000\n"})
    # 1.5 s of CPU in 1 s of wall time with a 2-CPU quota → 1.5 / (1 × 2) = 75 %
    assert meter.cpu_percent() == pytest.approx(75.0)
    assert meter.memory_used() == 2 * GIB  # 3 GiB used − 1 GiB inactive file cache


def test_v1_limits_and_usage(tmp_path: Path) -> None:
    root, own = v1_tree(tmp_path)
    limits = read_limits(root, own)
    assert limits is not None
    assert (limits.version, limits.cpus, limits.memory_bytes) == (1, 1.5, 512 << 20)
    meter = CgroupMeter(limits)
    assert meter.cpu_usage_ns() == 5_000_000_000
    assert meter.memory_used() == 200 << 20  # 300 MiB − 100 MiB inactive


def test_no_cgroup_file_system_and_no_limits(tmp_path: Path) -> None:
    assert read_limits(tmp_path / "nothing", str(tmp_path / "none")) is None
    root = tmp_path / "open"
    write(root, {"cgroup.controllers": "", "cpu.max": "max 100000\n", "memory.max": "max\n"})
    limits = read_limits(root, str(tmp_path / "none"))
    assert limits is not None and not limits.limited
    assert container_record(limits, 16) is None


@pytest.mark.parametrize(
    ("limits", "text"),
    [
        (CgroupLimits(2, 2.0, 4 * GIB), "container: 2.0 CPUs of 16 host cores, memory limit 4 GiB"),
        (CgroupLimits(1, 1.5, None), "container: 1.5 CPUs of 16 host cores, no memory limit"),
        (CgroupLimits(2, None, 512 << 20), "container: no CPU quota, memory limit 0.5 GiB"),
    ],
)
def test_container_record(limits: CgroupLimits, text: str) -> None:
    record = container_record(limits, 16)
    assert record is not None and record["description"] == text
    assert (record["cpus"], record["memory_limit_bytes"]) == (limits.cpus, limits.memory_bytes)


def test_cpu_capacity_is_the_tightest_of_cores_and_quota() -> None:
    assert cpu_capacity(None, cores=16, allowed=16) == 16
    assert cpu_capacity(None, cores=16, allowed=4) == 4  # taskset / cpuset: 4 cores allowed
    assert cpu_capacity(CgroupLimits(2, 2.0, None), cores=16, allowed=16) == 2
    assert isinstance(cpu_capacity(CgroupLimits(2, 2.0, None), cores=16, allowed=16), int)
    assert cpu_capacity(CgroupLimits(2, 1.5, None), cores=16, allowed=16) == 1.5
    assert cpu_capacity(CgroupLimits(2, 32.0, None), cores=16, allowed=16) == 16


def test_system_probe_uses_the_container_size(tmp_path: Path) -> None:
    root, own = v2_tree(tmp_path)
    limits = read_limits(root, own)
    probe = SystemProbe(limits)
    first = probe.sample()
    assert first.cpu_percent is None  # warming up
    assert (first.mem_total, first.cpu_quota, first.memory_limit) == (4 * GIB, 2.0, 4 * GIB)
    # available: at most 4 GiB − 2 GiB working set (the host may have less)
    assert first.mem_available <= 2 * GIB
    assert first.mem_percent == pytest.approx(100.0 * (4 * GIB - first.mem_available) / (4 * GIB))
    assert first.logical_cpus == 2
    write(root, {"docker/abc/cpu.stat": "usage_usec 1000000\n"})  # no CPU used since
    assert probe.sample().cpu_percent == 0.0


def test_unparsable_limit_is_named_in_a_finding(tmp_path: Path) -> None:
    from llmtop.probes.processes import group
    from llmtop.probes.verdict import Level, evaluate

    root = tmp_path / "odd"
    write(
        root, {"cgroup.controllers": "", "cpu.max": "lots 100000\n", "memory.max": "2147483648\n"}
    )
    limits = read_limits(root, str(tmp_path / "none"))
    assert limits is not None and (limits.cpus, limits.memory_bytes) == (None, 2 * GIB)
    assert limits.problems == (f"{root}/cpu.max: cannot parse 'lots 100000'",)
    probe = SystemProbe(limits)
    probe.sample()
    found = {f.code: f for f in evaluate(probe.sample(), group([])).findings}
    assert found["container-limits"].level is Level.INFO
    assert found["container-limits"].message.startswith(
        "running under cgroup limits (no CPU quota, memory limit 2 GiB)"
    )
    unknown = found["container-limits-unknown"]
    assert unknown.level is Level.INFO
    assert unknown.message.startswith(f"a container limit could not be read ({root}/cpu.max:")
