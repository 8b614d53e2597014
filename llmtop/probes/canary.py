"""The machine-speed canary: a tiny fixed workload timed between requests, never during one.

When an engine slows down and no program on the machine explains it, the machine itself may
have slowed: a lower CPU clock, a thermal limit, a virtual machine's neighbours, a cgroup
quota. The canary tells that apart from the engine's own state: it runs the same fixed work
every time, so its time moves only when the machine does (docs/method.md, "The machine-speed
canary").

Three parts, each timed with `time.perf_counter_ns()`:
* cpu: `CPU_LOOP_ITERATIONS` steps of a pure-Python integer recurrence (one thread, ~9 ms;
  bound by the core's clock and its share of that core);
* mem: reading one byte per 64-byte cache line across a `MEM_BUFFER_BYTES` buffer (a C-level
  strided slice copy, a few ms; bound by memory bandwidth and latency: the buffer is larger
  than common last-level caches);
* simd: `SIMD_MATMULS` float32 `SIMD_N` × `SIMD_N` matrix products on each of `threads`
  threads at once (numpy/BLAS, one BLAS thread per caller), timed until the last thread ends
  (2–5 ms on 2 vCPUs). A many-thread engine waits for its slowest thread at every step, so it
  slows when any one of its cores is taken; a one-thread part runs on whichever core is free.
  BLAS's own worker threads are not used: they keep spinning for tens of ms after a call
  (OpenBLAS), which would take CPU from the request that follows.
Each part runs `repeats` times and keeps its median time: one run disturbed by a momentary
interruption does not move it, while a lasting slowdown (a lower clock, a neighbour, a CPU
quota) slows most runs and does. The fastest run would hide a quota: the kernel accounts CPU
time per scheduler tick (often 4 ms), so a 3 ms run sometimes slips through a period's quota
unthrottled (seen in tests/integration/test_bench_machine_slows.py).

How well each part tracks the engine was measured with bench/canary_tracks.py (per-request
rank correlations, docs/method.md "The machine-speed canary"): weakly, the simd part best
under the neighbours the machine really had. A short canary that wakes from sleep gets a core
ahead of a long-running neighbour inside the machine, so it can miss one that costs the
engine its fair share of a core; such neighbours are named by attribution instead.

`CanaryCache` keeps the last bench's canary figures so `llmtop preflight` can say "this
machine is 15 % slower than at your last bench".
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import platformdirs
import psutil
from threadpoolctl import ThreadpoolController

from llmtop.files import write_atomically

# ~9 ms on a 2.6 GHz EPYC core (CPython 3.11): over two 4 ms scheduler ticks, so a CPU quota
# (accounted per tick) cannot let a whole run slip through unthrottled.
CPU_LOOP_ITERATIONS = 120_000
MEM_BUFFER_BYTES = 64 << 20  # over a 32 MiB L3: the reads go to memory
CACHE_LINE = 64
# float32 256 x 256 products, 6 per thread: 2-5 ms on 2 vCPUs of a 2.6 GHz EPYC (AVX2), 0.8 MB
# of operands per thread (cache-resident: the part measures the cores, not memory).
SIMD_N = 256
SIMD_MATMULS = 6
REPEATS = 3
CACHE_FORMAT = 2  # 2: the simd part was added


@dataclass(frozen=True, slots=True)
class CanaryResult:
    """One canary run: the median of `repeats` timings of each part, in ms; `threads`: the
    simd part's threads."""

    cpu_ms: float
    mem_ms: float
    simd_ms: float
    repeats: int = REPEATS
    threads: int = 1

    @property
    def total_ms(self) -> float:
        """cpu_ms + mem_ms + simd_ms: the figure compared between runs."""
        return self.cpu_ms + self.mem_ms + self.simd_ms

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (ms rounded to µs)."""
        return {"cpu_ms": round(self.cpu_ms, 3), "mem_ms": round(self.mem_ms, 3),
                "simd_ms": round(self.simd_ms, 3), "repeats": self.repeats,
                "threads": self.threads}


def engine_threads() -> int:
    """The threads a CPU engine computes with by default: one per physical core (llama.cpp's
    and the embedded engine's default), else one per logical CPU."""
    try:
        return psutil.cpu_count(logical=False) or os.cpu_count() or 1
    except (OSError, RuntimeError, psutil.Error):
        return os.cpu_count() or 1


class _SimdPart:
    """`threads` threads, each with its own operands, multiply float32 matrices together;
    `run()` gives the ms from their common start to the end of the last one."""

    def __init__(self, threads: int) -> None:
        rng = np.random.default_rng(0)
        shape = (SIMD_N, SIMD_N)
        self._operands = [
            (rng.standard_normal(shape, dtype=np.float32),
             rng.standard_normal(shape, dtype=np.float32), np.empty(shape, np.float32))
            for _ in range(threads)
        ]
        self._blas = ThreadpoolController()  # finds the BLAS libraries once (~0.3 ms)

    def _work(self, i: int, start: threading.Barrier, ends: list[int]) -> None:
        a, b, out = self._operands[i]
        start.wait()
        for _ in range(SIMD_MATMULS):
            np.matmul(a, b, out=out)  # BLAS sgemm, the GIL released
        ends[i] = time.perf_counter_ns()

    def run(self) -> float:
        n = len(self._operands)
        start, ends = threading.Barrier(n + 1), [0] * n
        workers = [threading.Thread(target=self._work, args=(i, start, ends), daemon=True)
                   for i in range(n)]
        for w in workers:
            w.start()
        with self._blas.limit(limits=1, user_api="blas"):  # one BLAS thread per caller
            start.wait()  # every worker is ready: the clock starts with all of them
            t0 = time.perf_counter_ns()
            for w in workers:
                w.join()
        return (max(ends) - t0) / 1e6


def cpu_loop(iterations: int) -> int:
    """The CPU part's work: `iterations` steps of an integer recurrence in pure Python (one
    thread, bound by the core's clock). Returns the last value (so nothing is optimised out)."""
    x = 1
    for _ in range(iterations):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF  # the C standard's example LCG
    return x


class Canary:
    """Runs the canary. The memory buffer and the matrices are allocated (and the buffer's
    pages touched) on the first run and kept until `close()`, so a run never pays page faults.
    Not thread-safe.

    repeats: timings per part (the median is kept); raises ValueError when < 1. threads: the
    simd part's threads (None: `engine_threads()`); raises ValueError when < 1.
    """

    def __init__(self, repeats: int = REPEATS, buffer_bytes: int = MEM_BUFFER_BYTES,
                 threads: int | None = None) -> None:
        if repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {repeats}")
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.repeats = repeats
        self.threads = threads or engine_threads()
        self._size = buffer_bytes
        self._buffer: bytearray | None = None
        self._simd: _SimdPart | None = None

    def run(self) -> CanaryResult:
        """Time the three parts now; about repeats × 15 ms on an idle machine."""
        if self._buffer is None or self._simd is None:
            self._buffer = bytearray(b"\x01") * self._size  # written: every page is real
            self._simd = _SimdPart(self.threads)
        buffer = self._buffer
        cpu, mem, simd = [], [], []
        for _ in range(self.repeats):
            t0 = time.perf_counter_ns()
            cpu_loop(CPU_LOOP_ITERATIONS)
            t1 = time.perf_counter_ns()
            _ = buffer[::CACHE_LINE]
            t2 = time.perf_counter_ns()
            cpu.append((t1 - t0) / 1e6)
            mem.append((t2 - t1) / 1e6)
            simd.append(self._simd.run())
        return CanaryResult(statistics.median(cpu), statistics.median(mem),
                            statistics.median(simd), self.repeats, self.threads)

    def close(self) -> None:
        """Release the buffer and the matrices (a later `run` allocates them again)."""
        self._buffer = None
        self._simd = None


def slower_pct(now_ms: float, then_ms: float) -> float:
    """How much slower `now` is than `then`, % (negative: faster): (now / then − 1) × 100.
    Raises ValueError when then_ms is not positive."""
    if not then_ms > 0:
        raise ValueError(f"a previous canary time must be > 0 ms, got {then_ms}")
    return (now_ms / then_ms - 1.0) * 100.0


def default_cache_path() -> Path:
    """<user cache dir>/llmtop/canary.json."""
    return Path(platformdirs.user_cache_dir("llmtop")) / "canary.json"


@dataclass(frozen=True, slots=True)
class CachedCanary:
    """The canary figures of a previous run: median cpu / mem / simd ms, when (ISO wall
    time), and what measured them ("bench" plus the log path, or "preflight")."""

    cpu_ms: float
    mem_ms: float
    simd_ms: float
    at: str
    source: str

    @property
    def total_ms(self) -> float:
        """cpu_ms + mem_ms + simd_ms."""
        return self.cpu_ms + self.mem_ms + self.simd_ms


class CanaryCache:
    """The previous run's canary figures on disk (JSON). A missing, corrupt or unwritable
    file is never fatal: `load` gives None and `store` gives False."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else default_cache_path()

    def load(self) -> CachedCanary | None:
        """The stored figures, None when absent or malformed."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if data.pop("format", None) != CACHE_FORMAT:
                return None
            cached = CachedCanary(**data)
        except (OSError, ValueError, TypeError, AttributeError):
            return None
        parts = (cached.cpu_ms, cached.mem_ms, cached.simd_ms)
        ok = all(isinstance(v, int | float) and v > 0 for v in parts)
        return cached if ok else None

    def store(self, cpu_ms: float, mem_ms: float, simd_ms: float, source: str) -> bool:
        """Replace the stored figures (written atomically); True when written."""
        entry = CachedCanary(cpu_ms, mem_ms, simd_ms, datetime.now().astimezone().isoformat(),
                             source)
        text = json.dumps({"format": CACHE_FORMAT, **asdict(entry)}, indent=1)
        return write_atomically(self.path, text)


@dataclass(frozen=True, slots=True)
class CanaryCheck:
    """The canary now against the previous run's. now: the median of `runs` canary runs;
    last: the cached figures (None: no previous bench); slower: how much slower the machine
    is now, % of the total canary time (negative: faster; None without `last`)."""

    now: CanaryResult
    last: CachedCanary | None
    slower: float | None

    def sentence(self) -> str:
        """"this machine is 15 % slower than at your last bench (…)" or why no comparison."""
        now = (f"canary {self.now.cpu_ms:.2f} ms CPU loop + {self.now.mem_ms:.2f} ms memory "
               f"stride + {self.now.simd_ms:.2f} ms SIMD on {self.now.threads} threads")
        if self.last is None or self.slower is None:
            return f"{now}; no previous bench to compare with"
        how = f"{abs(self.slower):.0f} % {'slower' if self.slower >= 0 else 'faster'}"
        return f"{now}: this machine is {how} than at your last bench ({self.last.at})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"now": self.now.to_dict(), "last": asdict(self.last) if self.last else None,
                "slower_pct": None if self.slower is None else round(self.slower, 1),
                "sentence": self.sentence()}


def check_against_last(runs: int = 5, cache: CanaryCache | None = None) -> CanaryCheck:
    """Run the canary `runs` times (median of each part) and compare its total time with the
    last bench's cached one (`CanaryCache`). Raises ValueError when runs < 1."""
    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    canary = Canary()
    try:
        results = [canary.run() for _ in range(runs)]
    finally:
        canary.close()
    now = CanaryResult(
        statistics.median(r.cpu_ms for r in results),
        statistics.median(r.mem_ms for r in results),
        statistics.median(r.simd_ms for r in results),
        canary.repeats,
        canary.threads,
    )
    last = (cache or CanaryCache()).load()
    slower = slower_pct(now.total_ms, last.total_ms) if last is not None else None
    return CanaryCheck(now, last, slower)
