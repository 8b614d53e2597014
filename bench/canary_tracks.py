"""Does a canary part track the engine? Per request, the rank correlation of the engine's
server prefill and decode rates with each candidate part's time, measured right before it.

    python bench/canary_tracks.py [--requests 40] [--neighbour idle|cycle|pinned] [--out F]
    python bench/canary_tracks.py --from-logs LOG [LOG ...]   # bench logs already written

Live: one embedded engine (a child process), the bench's default request (a fresh ~200-token
prompt, 100 output tokens); before each request every part runs 3 times and keeps its median:
  cpu / mem   the canary's own parts (probes/canary.py: a one-thread Python loop, a strided
              read of 64 MiB);
  simd        float32 256 x 256 matrix products, 6 on each of as many threads as the engine
              has (one per physical core), timed to the end of the last thread. BLAS keeps to
              its caller (OPENBLAS_NUM_THREADS=1, set before numpy loads): OpenBLAS's own
              workers spin for tens of ms after a call, which would slow the next request.
--neighbour cycle: a child process changes the load every 5 requests (idle / one spinning
Python thread / numpy BLAS / a 64 MiB copy loop); pinned: the same, pinned to CPU 1, so one
core is contended and the other free. With --from-logs, the parts are those the logs' canary
records have. A part tracks the engine when its time rises as the rates fall: Spearman's rho
(scipy.stats.spearmanr) strongly negative. docs/method.md, "The machine-speed canary", has
the figures measured here.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: one BLAS thread per caller

import argparse
import asyncio
import json
import multiprocessing as mp
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
from scipy.stats import spearmanr

from llmtop.probes.canary import (
    CACHE_LINE,
    CPU_LOOP_ITERATIONS,
    MEM_BUFFER_BYTES,
    cpu_loop,
)
from llmtop.servers.child import EmbeddedProcess
from llmtop.sessions.measure.prompts import PromptGenerator

OPTIONS = {"temperature": 0.0, "seed": 42, "num_ctx": 8192, "num_predict": 100}
RATES = ("prefill_tps", "decode_tps")


def timed(work: Callable[[], object]) -> Callable[[], float]:
    """work → a callable giving its wall time in ms."""
    def run() -> float:
        t0 = time.perf_counter_ns()
        work()
        return (time.perf_counter_ns() - t0) / 1e6
    return run


def simd_part(threads: int, n: int = 256, products: int = 6) -> Callable[[], float]:
    """`products` n x n float32 products on each of `threads` threads, started together;
    the ms until the last one ends."""
    rng = np.random.default_rng(0)
    ops = [(rng.standard_normal((n, n), dtype=np.float32),
            rng.standard_normal((n, n), dtype=np.float32), np.empty((n, n), np.float32))
           for _ in range(threads)]

    def work(i: int, start: threading.Barrier, ends: list[int]) -> None:
        a, b, out = ops[i]
        start.wait()
        for _ in range(products):
            np.matmul(a, b, out=out)
        ends[i] = time.perf_counter_ns()

    def run() -> float:
        start, ends = threading.Barrier(threads + 1), [0] * threads
        ts = [threading.Thread(target=work, args=(i, start, ends)) for i in range(threads)]
        for t in ts:
            t.start()
        start.wait()
        t0 = time.perf_counter_ns()
        for t in ts:
            t.join()
        return (max(ends) - t0) / 1e6
    return run


def parts() -> dict[str, Callable[[], float]]:
    """The candidate parts by name."""
    buffer = bytearray(b"\x01") * MEM_BUFFER_BYTES
    return {"cpu": timed(lambda: cpu_loop(CPU_LOOP_ITERATIONS)),
            "mem": timed(lambda: buffer[::CACHE_LINE]),
            "simd": simd_part(psutil.cpu_count(logical=False) or os.cpu_count() or 1)}


def neighbour(state: Any, stop: Any, pinned: bool) -> None:
    """A load that follows `state`: 0 idle, 1 a spinning Python loop, 2 numpy BLAS (a 64 MiB
    copy when pinned: BLAS would use the other core too), 3 a 64 MiB copy loop."""
    if pinned:
        os.sched_setaffinity(0, {1})
    src, dst = np.ones(64 << 20, np.uint8), np.empty(64 << 20, np.uint8)
    a = np.ones((512, 512), np.float32)
    while not stop.is_set():
        s = state.value
        if s == 0:
            time.sleep(0.02)
        elif s == 1:
            cpu_loop(200_000)
        elif s == 2 and not pinned:
            a @ a
        else:
            np.copyto(dst, src)


def live(requests: int, mode: str, out: Path | None) -> list[dict[str, float]]:
    """Run the engine and the parts; one row per request (printed, and written to `out`)."""
    candidates, rows = parts(), []
    engine = EmbeddedProcess()
    asyncio.run(engine.start())
    state, stop = mp.Value("i", 0), mp.Event()
    load = None
    if mode != "idle":
        load = mp.Process(target=neighbour, args=(state, stop, mode == "pinned"), daemon=True)
        load.start()
    prompts = PromptGenerator(7, salt=f"canary-tracks-{time.time_ns()}")
    try:
        with httpx.Client(base_url=engine.host, timeout=600) as client:
            def generate() -> dict[str, Any]:
                body = {"model": "gemma3:270m", "stream": False, "prompt": prompts.make(185),
                        "options": OPTIONS}
                reply: dict[str, Any] = client.post("/api/generate", json=body).json()
                return reply
            generate()  # warm-up
            for i in range(requests):
                state.value = (i // 5) % (3 if mode == "pinned" else 4)
                row = {name: statistics.median(f() for _ in range(3))
                       for name, f in candidates.items()}
                s = generate()
                row["prefill_tps"] = s["prompt_eval_count"] / s["prompt_eval_duration"] * 1e9
                row["decode_tps"] = s["eval_count"] / s["eval_duration"] * 1e9
                rows.append(row)
                print(json.dumps({k: round(v, 2) for k, v in row.items()}), flush=True)
                if out is not None:
                    with out.open("a", encoding="utf-8") as fh:
                        fh.write(json.dumps(row) + "\n")
    finally:
        stop.set()
        engine.stop()
    return rows


def from_logs(paths: list[Path]) -> list[dict[str, float]]:
    """Rows from bench logs: each measured ok request's rates and the canary before it."""
    rows = []
    for path in paths:
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        canary = {r["before_request"]: r for r in records if r.get("type") == "canary"}
        for r in records:
            c = canary.get(r.get("id")) if r.get("type") == "request" else None
            if c is None or r.get("phase") != "measure" or r.get("status") != "ok":
                continue
            row = {k.removesuffix("_ms"): c[k] for k in ("cpu_ms", "mem_ms", "simd_ms")
                   if c.get(k) is not None}
            row.update({k: r["metrics"][f"server_{k}"] for k in RATES})
            rows.append(row)
    return rows


def report(rows: list[dict[str, float]]) -> None:
    """Spearman's rho (and p) of each rate with each part, over the rows."""
    names = [k for k in rows[0] if k not in RATES]
    print(f"n = {len(rows)} requests")
    for rate in RATES:
        cells = []
        for name in names:
            rho, p = spearmanr([r[rate] for r in rows], [r[name] for r in rows])
            cells.append(f"{name} {rho:+.2f} (p {p:.2g})")
        print(f"{rate:12s} " + "  ".join(cells))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--neighbour", choices=("idle", "cycle", "pinned"), default="idle")
    parser.add_argument("--out", type=Path, default=None, help="append the rows here (JSONL)")
    parser.add_argument("--from-logs", type=Path, nargs="+", help="judge these bench logs")
    args = parser.parse_args()
    rows = from_logs(args.from_logs) if args.from_logs else live(
        args.requests, args.neighbour, args.out)
    if not rows:
        print("no request with a canary before it")
        return 1
    report(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
