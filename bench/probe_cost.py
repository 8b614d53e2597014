"""What one probe sample costs: CPU ms (process time) and wall ms per full sample.

A full sample = SystemProbe + ProcessProbe (the real machine's process table) + verdict,
exactly what ProbeSampler does minus the GPU. Optionally spawns idle `sleep` children to
reach a few hundred processes (they are killed and reaped at the end).

    python bench/probe_cost.py [-n 50] [--spawn 200] [--interval 0.2] [--json FILE]

Prints the first sample (it identifies every process) apart from the steady state (p50, max).
Targets (the "monitor cost" issue): ≤ 3 ms CPU p50 at ~70 processes, ≤ 10 ms at ~270.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import psutil

from llmtop.probes.processes import ProcessProbe
from llmtop.probes.system import SystemProbe
from llmtop.probes.verdict import evaluate


def _spawn(n: int) -> list[subprocess.Popen[bytes]]:
    sleep = shutil.which("sleep")
    if sleep is not None:
        argv = [sleep, "600"]
    else:  # Windows: an idle Python child instead
        argv = [sys.executable, "-c", "import time; time.sleep(600)"]
    return [subprocess.Popen(argv, stdin=subprocess.DEVNULL) for _ in range(n)]


def _measure(n: int, interval_s: float) -> tuple[list[float], list[float], list[float], int]:
    """Per sample: CPU ms (all threads), wall ms, the SystemProbe's CPU ms; and the process
    count of the last sample."""
    system, processes = SystemProbe(), ProcessProbe()
    cpu_ms: list[float] = []
    wall_ms: list[float] = []
    system_ms: list[float] = []
    n_procs = 0
    for _ in range(n + 1):
        c0, w0 = time.process_time_ns(), time.perf_counter_ns()
        s = system.sample()
        system_ms.append((time.process_time_ns() - c0) / 1e6)
        p = processes.sample()
        evaluate(s, p)
        cpu_ms.append((time.process_time_ns() - c0) / 1e6)
        wall_ms.append((time.perf_counter_ns() - w0) / 1e6)
        n_procs = p.n_procs
        time.sleep(interval_s)
    return cpu_ms, wall_ms, system_ms, n_procs


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; prints one table, returns 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=50, help="steady-state samples (default 50)")
    ap.add_argument("--spawn", type=int, default=0, help="idle child processes to add")
    ap.add_argument("--interval", type=float, default=0.2, help="seconds between samples")
    ap.add_argument("--json", help="write the result row here")
    args = ap.parse_args(argv)
    children = _spawn(args.spawn) if args.spawn > 0 else []
    try:
        cpu, wall, system_cpu, n_procs = _measure(args.n, args.interval)
    finally:
        for child in children:
            child.kill()
        for child in children:
            child.wait()
    print(
        f"processes: {n_procs} ({args.spawn} spawned), logical CPUs: {psutil.cpu_count()}, "
        f"samples: {args.n} + 1 first, psutil {psutil.__version__}"
    )
    print(f"{'':12}{'first':>9}{'p50':>9}{'max':>9}   (ms per sample)")
    for label, values in (("CPU ms", cpu), ("wall ms", wall)):
        steady = values[1:]
        print(f"{label:12}{values[0]:9.2f}{statistics.median(steady):9.2f}{max(steady):9.2f}")
    print(f"of which SystemProbe (CPU ms p50): {statistics.median(system_cpu[1:]):.2f}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    per_proc_us = 1000 * statistics.median(cpu[1:]) / max(n_procs, 1)
    print(f"CPU per process per sample (p50): {per_proc_us:.1f} µs")
    if args.json:
        target = 3.0 if n_procs <= 150 else 10.0
        p50 = statistics.median(cpu[1:])
        row = {"metric": f"probe sample CPU p50, {n_procs} processes", "measured": p50,
               "unit": "ms", "target": target, "met": p50 <= target}
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump([row], fh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
