"""How long does `llmtop report` take on a long bench log? A day of watching or a long bench
writes tens of thousands of requests; the report must stay linear in them.

    python bench/report_scale.py [--requests 1000 10000 100000] [--format md] [--profile]
    python bench/report_scale.py --write LOG --requests 5000   # the log only, no timing

The log is made from a real one: a 3-request bench on llmtop's paced engine (an in-process
engine with exact timings, llmtop/testing/paced.py) run through the real BenchRunner and
SessionLog, whose header, calibration, warm-up, probe samples and measured request are the
template. Each of the N requests is that measured record with its id, index and every
duration scaled by a factor (times × f, rates ÷ f, chunk offsets × f): log-normal noise of
5 % (numpy's default_rng, seed 44), a slow episode of 20 requests at 1.5 × every 5,000
requests and an isolated 3 × spike every 997; one probe sample every 10 requests. Then
`python -m llmtop report LOG --format md` runs in a subprocess, timed with perf_counter_ns
(the whole command: start, read, analysis, rendering). --profile runs the analysis under
cProfile in this process instead and prints its 25 costliest functions.

Target (docs/method.md, "Slow episodes"): a 100,000-request log reports in under 30 s on 2
cores.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

SEED = 44
NOISE = 0.05  # log-normal σ of every request's factor
EPISODE_EVERY = 5000  # a slow episode of EPISODE_LEN requests at EPISODE_FACTOR × this often
EPISODE_LEN = 20
EPISODE_FACTOR = 1.5
SPIKE_EVERY = 997  # an isolated 3 × request this often
PROBE_EVERY = 10


def template_records(folder: Path) -> list[dict[str, Any]]:
    """The records of a real 3-request bench log (paced engine, virtual clock), as JSON."""
    import llmtop.sessions.measure.request as measure_request
    from llmtop.sessions.measure.config import BenchConfig
    from llmtop.sessions.runners.bench import BenchRunner
    from llmtop.testing.paced import PacedEngine, paced_connection

    engine = PacedEngine(factor=lambda _j: 1.0)
    real_clock = measure_request.perf_counter_ns
    measure_request.perf_counter_ns = engine.clock  # exact timings, as the tests do
    cfg = BenchConfig(requests=3, warmup=1, prompt_tokens=(200,), max_tokens=100,
                      preflight_s=0, use_cache=False, remeasure_pause_s=0, remeasure_budget=0)
    path = folder / "template.jsonl"
    try:
        asyncio.run(BenchRunner(paced_connection(engine), cfg, str(path)).run())
    finally:
        measure_request.perf_counter_ns = real_clock
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def scaled(rec: dict[str, Any], f: float) -> dict[str, Any]:
    """A request record with every duration × f (rates ÷ f, chunk offsets × f)."""
    out = copy.deepcopy(rec)
    metrics = out.get("metrics") or {}
    for key, value in list(metrics.items()):
        if isinstance(value, int | float) and not isinstance(value, bool):
            if key.endswith("_ms"):
                metrics[key] = round(value * f, 3)
            elif key.endswith("_tps"):
                metrics[key] = round(value / f, 3)
        elif key == "itl_ms" and isinstance(value, list):
            metrics[key] = [round(v * f, 3) for v in value]
    stats = out.get("stats") or {}
    for key, value in list(stats.items()):
        if key.endswith("_duration") and isinstance(value, int):
            stats[key] = round(value * f)
    out["chunks"] = [[round(c[0] * f), *c[1:]] for c in out.get("chunks") or []]
    return out


def factors(n: int, seed: int = SEED, noise: float = NOISE) -> np.ndarray:
    """Each request's factor (module docstring): noise, episodes, spikes."""
    rng = np.random.default_rng(seed)
    f = np.exp(noise * rng.standard_normal(n))
    for start in range(EPISODE_EVERY // 2, n, EPISODE_EVERY):
        f[start:start + EPISODE_LEN] *= EPISODE_FACTOR
    f[SPIKE_EVERY - 1::SPIKE_EVERY] *= 3.0
    return f


def write_log(path: Path, n: int, folder: Path, noise: float = NOISE) -> Path:
    """A bench log of n measured requests made from the template (module docstring); the
    header's request count is n (the protocol the log says it ran)."""
    records = template_records(folder)
    measured = next(r for r in records if r.get("type") == "request"
                    and r.get("phase") == "measure" and r.get("status") == "ok")
    probes = [r for r in records if r.get("type") == "probe"] or [None]
    head = [r for r in records if r.get("type") not in ("request", "probe", "canary", "end")
            or (r.get("type") == "request" and r.get("phase") != "measure")]
    head = [r for r in head if r.get("type") != "summary"]
    base_id = max(int(r.get("id", 0)) for r in records if r.get("type") == "request")
    with path.open("w", encoding="utf-8") as out:
        for r in head:
            if r.get("type") == "header" and isinstance(r.get("bench"), dict):
                r = {**r, "bench": {**r["bench"], "requests": n}}
            out.write(json.dumps(r) + "\n")
        for i, f in enumerate(factors(n, noise=noise)):
            rid = base_id + 1 + i
            rec = scaled(measured, float(f))
            rec.update(id=rid, index=i + 1)
            out.write(json.dumps(rec) + "\n")
            if i % PROBE_EVERY == 0 and probes[0] is not None:
                out.write(json.dumps({**probes[i // PROBE_EVERY % len(probes)],
                                      "request_id": rid}) + "\n")
        out.write(json.dumps({"type": "end", "ended_at": "2026-01-01T00:00:00+00:00"}) + "\n")
    return path


def time_report(path: Path, fmt: str) -> tuple[float, int]:
    """(seconds, exit code) of `python -m llmtop report LOG --format fmt`."""
    t0 = time.perf_counter_ns()
    done = subprocess.run([sys.executable, "-m", "llmtop", "report", str(path), "--format", fmt],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    if done.returncode not in (0, 1):
        print(done.stderr.decode(errors="replace")[-2000:], file=sys.stderr)
    return (time.perf_counter_ns() - t0) / 1e9, done.returncode


def profile(path: Path, fmt: str) -> None:
    """The report's read, analysis and rendering under cProfile: the 25 costliest."""
    from llmtop.sessions.records.log import read_log
    from llmtop.sessions.reports.formats import render
    from llmtop.sessions.reports.run import build

    prof = cProfile.Profile()
    prof.enable()
    render(build(read_log(path)), fmt)
    prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--format", default="md", choices=("md", "csv", "json", "html"))
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--write", type=Path, help="write the log here and stop")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if args.write:
            write_log(args.write, args.requests[0], folder)
            return 0
        print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
        for n in args.requests:
            path = write_log(folder / f"n{n}.jsonl", n, folder)
            size = path.stat().st_size / 1e6
            if args.profile:
                profile(path, args.format)
                continue
            seconds, rc = time_report(path, args.format)
            print(f"{n:>7} requests ({size:.0f} MB): report --format {args.format} "
                  f"{seconds:.1f} s, exit {rc}")
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
