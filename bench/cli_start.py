"""How long `llmtop` takes to start: `--version`, `--help` and each command's `--help`, from
exec to exit, beside the bare interpreter (`python -c pass`), measured interleaved.

    python bench/cli_start.py [--rounds 7] [--json FILE]

Each round runs every command line once, in a shuffled order, as a fresh process; a row gives
the median wall time over the rounds (target ≤ 150 ms, issue 31: hyperfine, ripgrep and gh
answer `--version` in milliseconds) and the median CPU time the process used (user + system,
from the kernel's accounting of the waited-for child). The interpreter's own start is a row
without a target, the floor every command stands on.

One more row: `llmtop run` from exec to its request's arrival at the engine (a scripted
Ollama server in this process stamps `/api/chat` as it arrives; `perf_counter_ns` is the
system-wide monotonic clock, so the child's exec and the server's stamp share it). It holds
the imports, connecting (version, model details), the first probe sample and the send: what
a script that calls `llmtop run` in a loop waits for before the engine starts work. It has
no target; its median is the row.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
from time import perf_counter_ns
from typing import Any

TARGET_MS = 150.0
LINES: dict[str, list[str]] = {
    "python -c pass (the floor)": [sys.executable, "-c", "pass"],
    "llmtop --version": [sys.executable, "-m", "llmtop", "--version"],
    "llmtop --help": [sys.executable, "-m", "llmtop", "--help"],
    **{f"llmtop {c} --help": [sys.executable, "-m", "llmtop", c, "--help"]
       for c in ("run", "bench", "load", "preflight", "report", "compare", "sessions", "relay",
                 "engine", "agent")},
}


def once(argv: list[str]) -> tuple[float, float]:
    """(wall ms, CPU ms) of one run of `argv`, its output discarded."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = perf_counter_ns()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall_ms = (perf_counter_ns() - t0) / 1e6
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_ms = ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1e3
    return wall_ms, cpu_ms


def measure(rounds: int) -> list[dict[str, Any]]:
    """One row per command line: median wall ms (with its target) and median CPU ms."""
    walls: dict[str, list[float]] = {k: [] for k in LINES}
    cpus: dict[str, list[float]] = {k: [] for k in LINES}
    for argv in LINES.values():  # warm the page cache: the first start of all reads the disk
        once(argv)
    for _ in range(rounds):
        order = list(LINES)
        random.shuffle(order)
        for name in order:
            wall, cpu = once(LINES[name])
            walls[name].append(wall)
            cpus[name].append(cpu)
    rows: list[dict[str, Any]] = []
    for name in LINES:
        wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
        floor = name.startswith("python")
        rows.append({"metric": f"start: {name}, wall (CPU {cpu:.0f} ms)", "measured": wall,
                     "unit": "ms", "target": None if floor else TARGET_MS,
                     "met": None if floor else wall <= TARGET_MS})
    return rows


class _ChatArrivals:
    """ASGI middleware: perf_counter_ns of each `/api/chat` request as it arrives."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.ns: list[int] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http" and scope.get("path") == "/api/chat":
            self.ns.append(perf_counter_ns())
        await self.app(scope, receive, send)


def exec_to_send(rounds: int) -> dict[str, Any]:
    """The `llmtop run` exec → request-arrival row (median ms over `rounds`)."""
    from llmtop.testing.scripted import Script, ServeInThread, Timing, create_scripted_app

    app = _ChatArrivals(create_scripted_app(Script(Timing(0.001, 2, 0.001))))
    delays: list[float] = []
    with ServeInThread(app) as url:
        argv = [sys.executable, "-m", "llmtop", "run", "--engine", "ollama", "--host", url,
                "--model", "timed", "--prompt", "hi", "--json"]
        env = {**os.environ, "NO_PROXY": "127.0.0.1"}
        for i in range(rounds + 1):  # the first warms the page cache
            t0 = perf_counter_ns()
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=True, env=env)
            if i:
                delays.append((app.ns[-1] - t0) / 1e6)
    return {"metric": "start: llmtop run, exec → its request at the engine", "unit": "ms",
            "measured": statistics.median(delays), "target": None, "met": None}


def main(argv: list[str] | None = None) -> int:
    """Print the rows (and write them as JSON); exit 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    rows = [*measure(args.rounds), exec_to_send(args.rounds)]
    for r in rows:
        target = "" if r["target"] is None else f"  (target ≤ {r['target']:g} ms)"
        print(f"{r['metric']:<60} {r['measured']:8.1f} ms{target}")
    print(f"load average {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
