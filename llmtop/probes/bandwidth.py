"""This machine's memory bandwidth, measured once by a copy test and cached: what decode on a
CPU can at most read its weights at (the bandwidth-bound verdict, sessions/analysis/bandwidth.py).

The test is STREAM's "Copy" kernel (McCalpin, STREAM benchmark: `a[i] = b[i]`, counting the
bytes read and the bytes written, 2 x the array per pass) with numpy's `copyto` on arrays far
larger than any last-level cache (128 MiB each), best of a few passes (STREAM reports the best
pass: the one least disturbed by the rest of the machine). numpy's copy runs on one core; a
single core of a desktop or laptop CPU reaches most of the socket's bandwidth (it is a large
share on Apple Silicon and client x86 parts, and less on many-channel servers), so the figure
is a floor of what several decode threads can read: a share of it near or over 100 % says
bound by memory all the more.

Each bench measures again (0.1–1 s, after its requests) and the best figure seen on this
machine (its architecture, CPUs and memory size) is kept in the user cache directory and
used: a machine busy with other work only ever measures less.
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import platformdirs
import psutil

from llmtop.files import write_atomically

ARRAY_BYTES = 128 << 20  # past the last-level cache a core sees (32-64 MiB on most parts)
PASSES = 3
CACHE_FORMAT = 1


@dataclass(frozen=True, slots=True)
class Bandwidth:
    """A memory bandwidth figure: bytes_per_s (bytes read + written per second), how it was
    measured (`method`), when (ISO wall time) and whether it came from the cache."""

    bytes_per_s: float
    method: str
    at: str
    cached: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: bytes_per_s, method, at, cached."""
        return {"bytes_per_s": self.bytes_per_s, "method": self.method, "at": self.at,
                "cached": self.cached}


def copy_bandwidth(array_bytes: int = ARRAY_BYTES, passes: int = PASSES) -> float:
    """Bytes per second of a STREAM-style copy of `array_bytes` (read + written counted), best
    of `passes`. Raises MemoryError when the two arrays cannot be allocated."""
    import numpy as np

    source = np.ones(array_bytes // 8, dtype=np.float64)
    target = np.empty_like(source)
    np.copyto(target, source)  # pages touched once before timing
    best = 0.0
    for _ in range(passes):
        t0 = perf_counter_ns()
        np.copyto(target, source)
        seconds = (perf_counter_ns() - t0) / 1e9
        if seconds > 0:
            best = max(best, 2 * source.nbytes / seconds)
    return best


def machine_key() -> str:
    """What the cached figure belongs to: the architecture, the CPU's name where the
    platform gives one, the logical CPUs and the memory size."""
    return (f"{platform.machine()} | {platform.processor()} | {psutil.cpu_count()} | "
            f"{psutil.virtual_memory().total}")


def default_cache_path() -> Path:
    """<user cache dir>/llmtop/bandwidth.json."""
    return Path(platformdirs.user_cache_dir("llmtop")) / "bandwidth.json"


def machine_bandwidth(cache: Path | None = None) -> Bandwidth | None:
    """This machine's memory bandwidth: the best of a new copy test and every earlier one on
    this machine (kept in the cache). A busy machine only ever measures less than its memory
    delivers, so the best figure seen is the honest one (STREAM's best-pass rule, across
    runs): a first test taken beside other work (7.8 GB/s here, 18.4 GB/s quiet) is
    replaced by a later quiet one, never believed for good. None when nothing could be
    measured (no memory for the arrays) and nothing is cached. A missing, corrupt or
    unwritable cache is never fatal."""
    path = cache or default_cache_path()
    key = machine_key()
    best: Bandwidth | None = None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") == CACHE_FORMAT and data.get("machine") == key and \
                isinstance(data.get("bytes_per_s"), int | float) and data["bytes_per_s"] > 0:
            best = Bandwidth(float(data["bytes_per_s"]), str(data.get("method", "")),
                             str(data.get("at", "")), cached=True)
    except (OSError, ValueError, AttributeError):
        pass
    try:
        rate = copy_bandwidth()
    except MemoryError:
        return best
    if best is not None and best.bytes_per_s >= rate:
        return best
    found = Bandwidth(rate, f"copy test, {2 * ARRAY_BYTES >> 20} MiB per pass, best of "
                      f"{PASSES}, one core", datetime.now().astimezone().isoformat())
    write_atomically(path, json.dumps({"format": CACHE_FORMAT, "machine": key,
                                       **found.to_dict()}))  # False: no cache, no harm
    return found


__all__ = ["Bandwidth", "copy_bandwidth", "machine_bandwidth"]
