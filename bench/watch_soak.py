"""A soak of `llmtop watch`: its memory and open files over many short requests.

    python bench/watch_soak.py [--requests 10000] [--quick] [--every 1000] [--json FILE]

One scripted Ollama-API upstream answering fast (`python -m llmtop.testing.scripted`, the
"timed" model with no delays: three text lines and the done line), and `llmtop watch --json
--no-probes --log FILE` in front of it, each a real child process. One client (httpx, one kept
connection) sends `--requests` short streamed `/api/generate` requests back to back through the
watch, each read to its end. Every `--every` requests the watch's resident memory (RSS,
psutil `memory_info().rss`, bytes) and open file descriptors (`num_fds()`) are sampled, with
the time so far.

The figure: the watch's RSS growth per request between request 1,000 (the first checkpoint:
imports, pools and caches warmed) and the last, in bytes per request, and the RSS after the
last request less the RSS after the first 1,000. Target: ≤ 10 MB from 1,000 to 10,000 short
requests (a watch left in front of a busy app for a day must not grow without bound). With
fewer than 10,000 requests (`--quick`: 2,000) the growth is projected to 10,000 at the
measured rate and the row says so: a projection assumes the rate holds, and memory that grows
in steps (an allocator's arenas, a list that doubles) can show only over the full run (one
quick run here projected 6 MB where the full run measured 37), so the full run is the figure.
Open descriptors after the last request less after the
first 1,000: informational (a leak shows as growth here first). Then the watch is sent
SIGTERM and given STOP_TIMEOUT_S to write what it holds and exit: the seconds it took are a
row (a watch that holds every finished request took 13 s after 10,000), and the --json lines
and log records it wrote are counted against the requests sent.

Exit status 0 when the target was met; 1 when it was missed or the soak did not finish (a
request that failed or ended without its done line: the reason is printed and is the row).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import httpx
import psutil

from llmtop.servers.child import free_port

HERE = Path(__file__).resolve().parent
TARGET_MB = 10.0  # RSS after 10,000 short requests less after 1,000
FIRST_CHECKPOINT = 1_000  # the growth is counted from here: warm-up is done by then
TARGET_REQUESTS = 10_000
QUICK_REQUESTS = 2_000
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0  # SIGTERM → SIGKILL: the watch writes what it still holds first
BODY = {"model": "timed", "prompt": "hi", "stream": True}
MB = 1_000_000  # decimal megabytes, as the target is stated


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The watch after `requests` requests: rss (bytes), fds (open descriptors), elapsed_s
    since the first request was sent."""

    requests: int
    rss: int
    fds: int
    elapsed_s: float


def wait_up(url: str, proc: subprocess.Popen[bytes], timeout_s: float = START_TIMEOUT_S) -> None:
    """Wait until `GET url/api/version` answers 200; SystemExit naming the child when it
    exits first or does not answer within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url}'s process exited with code {proc.returncode} before it "
                             "answered")
        try:
            if httpx.get(url + "/api/version", timeout=0.5, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} did not answer within {timeout_s:g} s")


def one_request(client: httpx.Client, url: str) -> None:
    """One short streamed /api/generate read to its end; RuntimeError when it did not end
    with Ollama's done line (the soak counts only requests the watch saw through)."""
    last = b""
    with client.stream("POST", url + "/api/generate", json=BODY) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"HTTP {resp.status_code} from the watch: {resp.read()[:200]!r}")
        for line in resp.iter_lines():
            if line:
                last = line.encode()
    if not last or not json.loads(last).get("done"):
        raise RuntimeError(f"the stream ended without its done line (last line {last[:200]!r})")


def sample(watch: psutil.Process, requests: int, t0_ns: int) -> Checkpoint:
    """The watch's RSS and descriptors now."""
    return Checkpoint(requests, watch.memory_info().rss, watch.num_fds(),
                      (perf_counter_ns() - t0_ns) / 1e9)


def soak(url: str, watch_pid: int, requests: int, every: int) -> list[Checkpoint]:
    """Send `requests` requests back to back on one kept connection, sampling the watch after
    every `every` (and after the last)."""
    watch = psutil.Process(watch_pid)
    points: list[Checkpoint] = []
    with httpx.Client(timeout=30, trust_env=False) as client:
        t0 = perf_counter_ns()
        for i in range(1, requests + 1):
            try:
                one_request(client, url)
            except (RuntimeError, httpx.HTTPError) as exc:
                raise RuntimeError(f"request {i:,}: {type(exc).__name__}: {exc}") from exc
            if i % every == 0 or i == requests:
                points.append(sample(watch, i, t0))
                p = points[-1]
                print(f"{p.requests:>7} requests  RSS {p.rss / MB:8.2f} MB  fds {p.fds:4d}  "
                      f"{p.elapsed_s:7.1f} s", flush=True)
    return points


def start_children(folder: Path) -> tuple[list[subprocess.Popen[bytes]], str]:
    """The scripted upstream and the watch in front of it; (both processes, the watch's URL).
    The watch's --json lines go to a file: a pipe nobody read would fill and stall it."""
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    up_port, watch_port = free_port(), free_port()
    upstream = subprocess.Popen(
        [sys.executable, "-m", "llmtop.testing.scripted", "--port", str(up_port),
         "--first-ms", "0", "--chunks", "3", "--gap-ms", "0"], env=env)
    with (folder / "watch.out").open("wb") as out, (folder / "watch.err").open("wb") as err:
        watch = subprocess.Popen(
            [sys.executable, "-m", "llmtop", "watch", "--json", "--no-probes", "--listen",
             f"127.0.0.1:{watch_port}", "--upstream", f"http://127.0.0.1:{up_port}",
             "--log", str(folder / "watch.jsonl")],
            env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    procs = [upstream, watch]
    try:
        wait_up(f"http://127.0.0.1:{up_port}", upstream)
        wait_up(f"http://127.0.0.1:{watch_port}", watch)
    except BaseException:
        stop(procs)
        raise
    return procs, f"http://127.0.0.1:{watch_port}"


def stop(procs: list[subprocess.Popen[bytes]]) -> list[tuple[int | None, float]]:
    """SIGTERM each child, SIGKILL after STOP_TIMEOUT_S; per child (its exit status, None
    when it had to be killed; seconds from SIGTERM to its end)."""
    t0 = perf_counter_ns()
    for p in procs:
        if p.poll() is None:
            p.terminate()
    ends: list[tuple[int | None, float]] = []
    for p in procs:
        try:
            rc: int | None = p.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rc = None
        ends.append((rc, (perf_counter_ns() - t0) / 1e9))
    return ends


def rows_for(points: list[Checkpoint], exit_s: float | None) -> list[dict[str, Any]]:
    """The result rows: growth 1,000 → 10,000 (measured, or projected at the measured rate
    when the run was shorter), bytes per request, descriptors, the checkpoints' RSS, and
    how long the watch took to exit on SIGTERM (None: it had to be killed)."""
    first = next(p for p in points if p.requests >= FIRST_CHECKPOINT)
    last = points[-1]
    span = last.requests - first.requests
    per_request = (last.rss - first.rss) / span if span else 0.0
    measured = last.requests >= TARGET_REQUESTS
    growth_mb = ((last.rss - first.rss) if measured
                 else per_request * (TARGET_REQUESTS - FIRST_CHECKPOINT)) / MB
    how = "measured" if measured else f"projected from {first.requests:,}→{last.requests:,}"
    rate = last.requests / last.elapsed_s if last.elapsed_s else 0.0
    return [
        {"metric": f"watch RSS growth, 1,000→10,000 short requests ({how})",
         "measured": growth_mb, "unit": "MB", "target": TARGET_MB,
         "met": growth_mb <= TARGET_MB},
        {"metric": f"watch RSS growth per request, {first.requests:,}→{last.requests:,}",
         "measured": per_request, "unit": "B", "target": None, "met": None},
        {"metric": f"watch RSS after {first.requests:,} / {last.requests:,} requests: "
                   f"{first.rss / MB:.1f} / {last.rss / MB:.1f} MB; {rate:.0f} requests/s",
         "measured": last.rss / MB, "unit": "MB", "target": None, "met": None},
        {"metric": f"watch open descriptors, {last.requests:,} less {first.requests:,} "
                   f"requests ({first.fds} → {last.fds})",
         "measured": float(last.fds - first.fds), "unit": "fds", "target": None, "met": None},
        {"metric": f"watch's exit on SIGTERM after {last.requests:,} requests"
                   + ("" if exit_s is not None else f" (killed: none within {STOP_TIMEOUT_S:g} s)"),
         "measured": exit_s, "unit": "s", "target": None, "met": None},
    ]


def main(argv: list[str] | None = None) -> int:
    """Run the soak, print the checkpoints and the figure; exit 1 when the target was missed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=TARGET_REQUESTS)
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_REQUESTS:,} requests")
    ap.add_argument("--every", type=int, default=FIRST_CHECKPOINT,
                    help="sample the watch after every this many requests")
    ap.add_argument("--json", help="write the result rows here (bench/run_all.py)")
    args = ap.parse_args(argv)
    requests = QUICK_REQUESTS if args.quick else args.requests
    if requests <= FIRST_CHECKPOINT or args.every < 1 or FIRST_CHECKPOINT % args.every:
        ap.error(f"--requests must be above {FIRST_CHECKPOINT:,} (the first checkpoint) and "
                 f"--every a divisor of {FIRST_CHECKPOINT:,}")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", flush=True)
    with tempfile.TemporaryDirectory(prefix="llmtop-soak-") as tmp:
        procs, url = start_children(Path(tmp))
        failure = ""
        try:
            points = soak(url, procs[1].pid, requests, args.every)
        except (RuntimeError, psutil.Error) as exc:
            points, failure = [], str(exc)
        finally:
            ends = stop(procs)
        watch_rc, watch_s = ends[1]
        exit_s = watch_s if watch_rc is not None else None
        err = (Path(tmp) / "watch.err").read_text(errors="replace").strip()
        print(f"the watch ended {watch_s:.1f} s after SIGTERM, exit status {watch_rc} (None: "
              f"killed); its stderr's last lines: {err[-1500:]}", file=sys.stderr)
        lines = sum(1 for _ in (Path(tmp) / "watch.out").open("rb"))
        records = sum(1 for _ in (Path(tmp) / "watch.jsonl").open("rb"))
    if not points:
        print(f"the soak did not finish: {failure}", file=sys.stderr)
        rows = [{"metric": f"watch soak did not finish: {failure}", "measured": None,
                 "unit": "", "target": TARGET_MB, "met": False}]
    else:
        print(f"the watch printed {lines:,} --json lines and logged {records:,} records for "
              f"{requests:,} requests")
        rows = rows_for(points, exit_s)
        for r in rows:
            shown = "—" if r["measured"] is None else f"{r['measured']:,.2f} {r['unit']}"
            print(f"{r['metric']}: {shown}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows), encoding="utf-8")
    return 0 if all(r["met"] is not False for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
