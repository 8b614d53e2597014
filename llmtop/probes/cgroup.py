"""A container's real size: the cgroup CPU quota and memory limit, and usage against them.

Inside a container psutil reports the host: 16 cores and 64 GiB where the container may use
2 CPUs and 4 GiB. The kernel enforces the cgroup limits, so they are the machine llmtop runs
on: percentages and verdicts use them (`SystemProbe`, `ProcessProbe`) and the environment
record says "container: 2.0 CPUs of 16 host cores, memory limit 4 GiB".

Files read (Linux Documentation/admin-guide/cgroup-v2.rst and cgroup-v1/):
* v2 (a `cgroup.controllers` file at the root): `cpu.max` ("QUOTA PERIOD" or "max PERIOD"),
  `memory.max` (bytes or "max"), `cpu.stat` (`usage_usec`), `memory.current`, `memory.stat`.
* v1: `cpu.cfs_quota_us` (-1 = none) / `cpu.cfs_period_us`, `memory.limit_in_bytes` (a huge
  page-aligned number = none), `cpuacct.usage` (ns), `memory.usage_in_bytes`, `memory.stat`.
Limits nest, so the tightest one from this process's cgroup up to the root applies. Memory in
use is usage minus inactive file cache, the working set `docker stats` shows.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = "/sys/fs/cgroup"
SELF_CGROUP = "/proc/self/cgroup"
NO_LIMIT_BYTES = 1 << 60  # v1 writes "no limit" as LONG_MAX rounded to a page: anything this big
GIB = 1024**3


@dataclass(frozen=True, slots=True)
class CgroupLimits:
    """The limits that apply to this process.

    version: 1 or 2. cpus: CPU quota in CPUs (quota / period, 2.0 = two full cores), None when
    unlimited. memory_bytes: memory limit, None when unlimited. cpu_dir / memory_dir: the
    cgroup directories whose usage counters `CgroupMeter` reads (None when not found).
    problems: limit files that exist but could not be parsed ("…/cpu.max: expected …"); the
    limit they hold is then unknown, which the verdict says (never a silent guess).
    """

    version: int
    cpus: float | None
    memory_bytes: int | None
    cpu_dir: Path | None = None
    memory_dir: Path | None = None
    problems: tuple[str, ...] = ()

    @property
    def limited(self) -> bool:
        """True when a CPU quota or a memory limit applies."""
        return self.cpus is not None or self.memory_bytes is not None

    def describe(self, host_cores: int) -> str:
        """"container: 2.0 CPUs of 16 host cores, memory limit 4 GiB" (either part may read
        "no CPU quota" / "no memory limit")."""
        cpu = f"{self.cpus:.1f} CPUs of {host_cores} host cores" if self.cpus else "no CPU quota"
        mem = (
            f"memory limit {_gib(self.memory_bytes)}" if self.memory_bytes else "no memory limit"
        )
        return f"container: {cpu}, {mem}"


def _gib(n: int) -> str:
    return f"{n / GIB:.3g} GiB"


def parse_cpu_max(text: str) -> float | None:
    """v2 `cpu.max` → CPUs: "200000 100000" → 2.0; "max 100000" → None. Raises ValueError for
    anything else."""
    parts = text.split()
    if not parts or len(parts) > 2:
        raise ValueError(f"cpu.max: expected 'QUOTA PERIOD', got {text!r}")
    if parts[0] == "max":
        return None
    period = int(parts[1]) if len(parts) == 2 else 100_000  # kernel default period, µs
    return _ratio(int(parts[0]), period)


def parse_cfs(quota: str, period: str) -> float | None:
    """v1 `cpu.cfs_quota_us`, `cpu.cfs_period_us` → CPUs: ("150000", "100000") → 1.5;
    a quota of -1 → None. Raises ValueError for non-integers."""
    q = int(quota.strip())
    return None if q < 0 else _ratio(q, int(period.strip()))


def _ratio(quota: int, period: int) -> float:
    if quota <= 0 or period <= 0:
        raise ValueError(f"CPU quota and period must be > 0, got {quota} / {period}")
    return quota / period


def parse_memory_limit(text: str) -> int | None:
    """`memory.max` (v2) or `memory.limit_in_bytes` (v1) → bytes; "max" or a v1 "no limit"
    value (>= 2**60) → None. Raises ValueError for anything else."""
    value = text.strip()
    if value == "max":
        return None
    n = int(value)
    return None if n >= NO_LIMIT_BYTES else n


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return None


def _own_paths(self_cgroup: str) -> dict[str, str]:
    """/proc/self/cgroup → {controller: path}; v2's single line "0::/path" is keyed ""."""
    out: dict[str, str] = {}
    for line in (_read(Path(self_cgroup)) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(","):
                out[controller] = parts[2]
    return out


def _chain(mount: Path, own: str | None) -> list[Path]:
    """This process's cgroup directory under `mount`, then its parents up to `mount`.
    A path that does not exist there (a cgroup namespace hides it) leaves only `mount`."""
    here = mount / own.strip("/") if own else mount
    if not here.is_dir():
        return [mount]
    chain = [here]
    while here != mount and mount in here.parents:
        here = here.parent
        chain.append(here)
    return chain


def _tightest(
    dirs: list[Path], read: Callable[[Path], float | int | None], problems: list[str]
) -> float | int | None:
    """The smallest limit over `dirs`; a value that cannot be parsed is skipped and named in
    `problems` (the caller turns it into a finding rather than guessing silently)."""
    found = []
    for d in dirs:
        try:
            value = read(d)
        except ValueError as exc:
            problems.append(str(exc))
            value = None
        if value is not None:
            found.append(value)
    return min(found) if found else None


def read_limits(
    root: str | os.PathLike[str] = ROOT, self_cgroup: str = SELF_CGROUP
) -> CgroupLimits | None:
    """The CPU quota and memory limit of this process's cgroup (`root`: the cgroup mount,
    `self_cgroup`: a /proc/self/cgroup-like file; tests point both at a fake tree).
    None when there is no cgroup file system (macOS, Windows). Never raises."""
    base = Path(root)
    own = _own_paths(self_cgroup)
    bad: list[str] = []
    if (base / "cgroup.controllers").is_file():
        dirs = _chain(base, own.get(""))
        cpus = _tightest(dirs, lambda d: _maybe(d / "cpu.max", parse_cpu_max), bad)
        mem = _tightest(dirs, lambda d: _maybe(d / "memory.max", parse_memory_limit), bad)
        return CgroupLimits(2, cpus, _int(mem), dirs[0], dirs[0], tuple(bad))
    cpu_mount, mem_mount = _v1_mount(base, "cpu"), _v1_mount(base, "memory")
    if cpu_mount is None and mem_mount is None:
        return None
    cpu_dirs = _chain(cpu_mount, own.get("cpu")) if cpu_mount else []
    mem_dirs = _chain(mem_mount, own.get("memory")) if mem_mount else []
    cpus = _tightest(cpu_dirs, _v1_quota, bad)
    mem = _tightest(
        mem_dirs, lambda d: _maybe(d / "memory.limit_in_bytes", parse_memory_limit), bad
    )
    acct = _v1_mount(base, "cpuacct")
    acct_dir = _chain(acct, own.get("cpuacct"))[0] if acct else None
    mem_dir = mem_dirs[0] if mem_dirs else None
    return CgroupLimits(1, cpus, _int(mem), acct_dir, mem_dir, tuple(bad))


def _v1_mount(base: Path, controller: str) -> Path | None:
    """The v1 hierarchy holding `controller` ("cpu" may be mounted as "cpu,cpuacct")."""
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return None
    for name in names:
        if controller in name.split(",") and (base / name).is_dir():
            return base / name
    return None


def _v1_quota(d: Path) -> float | None:
    quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
    if quota is None or period is None:
        return None
    try:
        return parse_cfs(quota, period)
    except ValueError:
        raise ValueError(f"{d}/cpu.cfs_quota_us, cpu.cfs_period_us: cannot parse "
                         f"{quota.strip()!r} / {period.strip()!r}") from None


def _maybe(path: Path, parse: Callable[[str], float | int | None]) -> float | int | None:
    """`parse` of the file's text; None when it cannot be read. Raises ValueError naming the
    file and its content when the text is not what the kernel writes there."""
    text = _read(path)
    if text is None:
        return None
    try:
        return parse(text)
    except ValueError:
        raise ValueError(f"{path}: cannot parse {text.strip()!r}") from None


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


class CgroupMeter:
    """Usage against the limits: CPU % of the quota since the previous call, memory in use.

    clock_ns: monotonic nanoseconds (default `time.perf_counter_ns`; tests pass a fake).
    """

    def __init__(
        self, limits: CgroupLimits, clock_ns: Callable[[], int] = time.perf_counter_ns
    ) -> None:
        self.limits = limits
        self._clock = clock_ns
        self._prev: tuple[int, int] | None = None

    def cpu_usage_ns(self) -> int | None:
        """Total CPU time the cgroup used, ns (v2 `cpu.stat` usage_usec, v1 `cpuacct.usage`)."""
        d = self.limits.cpu_dir
        if d is None:
            return None
        if self.limits.version == 2:
            stat = _stat(d / "cpu.stat")
            return stat["usage_usec"] * 1000 if "usage_usec" in stat else None
        text = _read(d / "cpuacct.usage")
        return int(text) if text and text.strip().isdigit() else None

    def cpu_percent(self) -> float | None:
        """% of the CPU quota used since the previous call, 0–100 (100 = the whole quota);
        None on the first call, without a quota, or when the counter cannot be read."""
        cpus, usage = self.limits.cpus, self.cpu_usage_ns()
        now = self._clock()
        prev, self._prev = self._prev, (None if usage is None else (now, usage))
        if cpus is None or usage is None or prev is None or now <= prev[0]:
            return None
        return min(100.0, max(0.0, 100.0 * (usage - prev[1]) / ((now - prev[0]) * cpus)))

    def memory_used(self) -> int | None:
        """Bytes in use: usage minus inactive file cache (`docker stats`' working set)."""
        d = self.limits.memory_dir
        if d is None:
            return None
        v2 = self.limits.version == 2
        text = _read(d / ("memory.current" if v2 else "memory.usage_in_bytes"))
        if text is None or not text.strip().isdigit():
            return None
        stat = _stat(d / "memory.stat")
        inactive = stat.get("inactive_file" if v2 else "total_inactive_file", 0)
        return max(0, int(text) - inactive)


def _stat(path: Path) -> dict[str, int]:
    out = {}
    for line in (_read(path) or "").splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[key] = int(value)
    return out


@dataclass(frozen=True, slots=True)
class Throttling:
    """CPU throttling of cgroups by their CPU quota, cumulative since each cgroup was made.

    periods: enforcement periods in which a cgroup ran out of quota (`nr_throttled`).
    throttled_ns: time its tasks waited for the next period (v2 `throttled_usec` × 1000, v1
    `throttled_time`). Summed over every cgroup read (each level of a hierarchy counts the
    throttling of its own quota). cgroups: how many cpu.stat files were read.
    """

    periods: int
    throttled_ns: int
    cgroups: int


def read_throttling(
    pids: tuple[int, ...] = (), root: str | os.PathLike[str] = ROOT, proc: str = "/proc"
) -> Throttling | None:
    """Throttling of this process's cgroup and of `pids`' (the engine's), each with its parents
    up to the mount (a quota set on a parent throttles its children); a cgroup shared by several
    of them counts once. Reads v2 `cpu.stat` (`nr_throttled`, `throttled_usec`) or v1
    `cpu/…/cpu.stat` (`nr_throttled`, `throttled_time` in ns); no privileges needed. None when
    no cpu.stat file could be read (no cgroups, macOS, Windows). Never raises."""
    base = Path(root)
    v2 = (base / "cgroup.controllers").is_file()
    mount = base if v2 else _v1_mount(base, "cpu")
    if mount is None:
        return None
    dirs: dict[Path, None] = {}
    for who in ("self", *(str(p) for p in pids)):
        own = _own_paths(f"{proc}/{who}/cgroup")
        path = own.get("") if v2 else own.get("cpu")
        if path is not None:
            dirs.update(dict.fromkeys(_chain(mount, path)))
    periods = waited = read = 0
    for d in dirs:
        stat = _stat(d / "cpu.stat")
        if "nr_throttled" not in stat:
            continue
        read += 1
        periods += stat["nr_throttled"]
        waited += stat["throttled_usec"] * 1000 if v2 else stat.get("throttled_time", 0)
    return Throttling(periods, waited, read) if read else None
