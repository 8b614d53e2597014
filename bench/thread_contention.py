"""What moves the embedded engine's decode rate from run to run on a shared machine: its
thread count against the machine's cores, and the other tenants' load (issue 25, item 2).

    python bench/thread_contention.py [--rounds 6] [--num-predict 48] [--threads 1 2]

Starts one embedded engine and sends rounds of requests, one per thread count in each
round, the order alternating between rounds (so a tenant's burst lands on both), each
with a fresh prompt (no cache hit) and temperature 0. Per request it prints the server's
decode rate (eval_count / eval_duration) and the 1-minute load average read just before;
the summary gives, per thread count, the median, min and max rate and the spread
((max − min) / median, %). A thread count equal to the cores stalls whenever another
program takes one (each token waits for its slowest thread), so its rate falls by far more
than the load's share; one thread fewer leaves the engine room.

`--neighbour` runs every round twice, quiet and beside one busy process (a Python loop that
keeps one CPU busy, as a browser tab or a build does), and reports each thread count's
median in both, and the worse of the two: the figure a default thread count is chosen on
(issue 32, row 8).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys

import httpx

from llmtop.servers.child import EmbeddedProcess

WORDS = ["river", "stone", "lamp", "garden", "quiet", "copper", "window", "meadow", "signal",
         "harbor", "lantern", "orbit", "velvet", "cedar", "thunder", "marble", "ribbon", "canyon"]


async def one(client: httpx.AsyncClient, model: str, threads: int, num_predict: int,
              rng: random.Random) -> tuple[float, float]:
    """(decode tok/s by the server's own counts, 1-minute load average before)."""
    load = os.getloadavg()[0]
    prompt = " ".join(rng.choice(WORDS) for _ in range(60)) + ". Continue the story."
    r = await client.post("/api/generate", json={
        "model": model, "prompt": prompt, "stream": False,
        "options": {"temperature": 0, "seed": 42, "num_predict": num_predict,
                    "num_thread": threads}})
    r.raise_for_status()
    body = r.json()
    return body["eval_count"] / body["eval_duration"] * 1e9, load


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--num-predict", type=int, default=48)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--neighbour", action="store_true",
                        help="each round quiet, then beside one busy process")
    args = parser.parse_args()
    proc = EmbeddedProcess()
    await proc.start()
    rng = random.Random(25)
    rates: dict[int, list[float]] = {t: [] for t in args.threads}
    beside: dict[int, list[float]] = {t: [] for t in args.threads}
    try:
        async with httpx.AsyncClient(base_url=proc.host, timeout=900, trust_env=False) as c:
            model = (await c.get("/api/tags")).json()["models"][0]["name"]
            for t in args.threads:  # warm-up: the load and one generation per setting
                await one(c, model, t, 4, rng)
            for k in range(args.rounds):
                order = args.threads if k % 2 == 0 else list(reversed(args.threads))
                for t in order:
                    rate, load = await one(c, model, t, args.num_predict, rng)
                    rates[t].append(rate)
                    print(f"round {k + 1} threads {t}: {rate:6.1f} tok/s (load {load:.1f} on "
                          f"{os.cpu_count()} CPUs)", flush=True)
                if not args.neighbour:
                    continue
                hog = await asyncio.create_subprocess_exec(sys.executable, "-c",
                                                           "while True: pass")
                try:
                    await asyncio.sleep(0.5)  # the loop is running before the requests
                    for t in order:
                        rate, load = await one(c, model, t, args.num_predict, rng)
                        beside[t].append(rate)
                        print(f"round {k + 1} threads {t} beside a busy process: "
                              f"{rate:6.1f} tok/s", flush=True)
                finally:
                    hog.kill()
                    await hog.wait()
    finally:
        proc.stop()
    for t, values in rates.items():
        if values:
            med = statistics.median(values)
            print(f"threads {t}: median {med:.1f} tok/s, min {min(values):.1f}, max "
                  f"{max(values):.1f}, range {(max(values) - min(values)) / med * 100:.0f} %")
    for t, values in beside.items():
        if values:
            quiet, busy = statistics.median(rates[t]), statistics.median(values)
            print(f"threads {t} beside a busy process: median {busy:.1f} tok/s "
                  f"({busy / quiet:.2f} of quiet); worse of the two {min(quiet, busy):.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
