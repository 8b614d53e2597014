"""A real CPU burner switched on in the middle of a bench run on the embedded engine, and off
again: is the episode found, the burner named, its cost stated, and the re-measured
baseline within ±5 % of a quiet run's (issue 25)?

    python bench/burner_episode.py [--requests 15] [--on-at 5] [--on-for 5] [-- bench flags]

One embedded engine; first a quiet run (`llmtop bench --json`), then the same protocol with
a burner: a python busy loop run under its own name, "llmtop-burner" (a symlink to python,
so the probes' app catalogue sees it as its own app), started once `--on-at` measured
requests are in the log and killed after `--on-for` more. The bench finds the episode and
re-measures after it (the burner gone). Printed: the episodes with their sentence (culprit
and cost), the attribution's culprit, the re-measured requests, both runs' baseline TTFT and
decode medians and their difference, %, and the load average before and after (the other
tenants' share). A bench script, not a test: on a shared 2-core machine the burner's effect
and the quiet baseline both move with the other tenants.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from llmtop.servers.child import EmbeddedProcess

NAME = "llmtop-burner"


def measured(log: Path) -> int:
    """Measured request records in the log so far."""
    try:
        lines = log.read_text().splitlines()
    except OSError:
        return 0
    n = 0
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        n += rec.get("type") == "request" and rec.get("phase") == "measure"
    return n


def bench(host: str, log: Path, requests: int, extra: list[str]) -> dict[str, Any]:
    """One `llmtop bench --json` run; its report (RuntimeError when it printed none)."""
    cmd = [sys.executable, "-m", "llmtop", "bench", "--engine", "embedded", "--host", host,
           "--requests", str(requests), "--log", str(log), "--json", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=3000)
    if not p.stdout.strip():
        raise RuntimeError(f"bench exited {p.returncode}: {p.stderr[-1500:]}")
    report: dict[str, Any] = json.loads(p.stdout)
    return report


def medians(report: dict[str, Any]) -> tuple[float | None, float | None]:
    """(baseline TTFT ms, baseline server decode tok/s) of the first prompt size."""
    s = report["sizes"][0]["summaries"]
    return (s.get("ttft_ms") or {}).get("median"), (s.get("server_decode_tps") or {}).get("median")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=15)
    parser.add_argument("--on-at", type=int, default=5, help="measured requests before it")
    parser.add_argument("--on-for", type=int, default=5, help="measured requests it lasts")
    parser.add_argument("extra", nargs="*", help="more `llmtop bench` flags (after --)")
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="llmtop-burner-"))
    link = out / NAME
    link.symlink_to(os.path.realpath(sys.executable))
    proc = EmbeddedProcess()
    asyncio.run(proc.start())
    print(f"load average before: {os.getloadavg()} on {os.cpu_count()} CPUs; logs in {out}",
          flush=True)
    burner: list[subprocess.Popen[bytes]] = []
    done = threading.Event()
    log = out / "burner.jsonl"

    def switch() -> None:
        while not done.is_set() and measured(log) < args.on_at:
            time.sleep(0.05)
        if done.is_set():
            return
        burner.append(subprocess.Popen([str(link), "-c", "while True: pass"]))
        print(f"burner on after request {args.on_at}", flush=True)
        while not done.is_set() and measured(log) < args.on_at + args.on_for:
            time.sleep(0.05)
        burner[0].kill()
        burner[0].wait(10)
        print(f"burner off after request {measured(log)}", flush=True)

    try:
        quiet = bench(proc.host, out / "quiet.jsonl", args.requests, args.extra)
        watcher = threading.Thread(target=switch, daemon=True)
        watcher.start()
        try:
            loud = bench(proc.host, log, args.requests, args.extra)
        finally:
            done.set()
            for b in burner:
                b.kill()
                b.wait(10)
    finally:
        proc.stop()
    print(f"load average after: {os.getloadavg()}")
    for name, report in (("quiet", quiet), ("burner", loud)):
        n = sum(r["phase"] == "measure" for r in report["sizes"][0]["requests"])
        ttft, decode = medians(report)
        print(f"{name}: {report['verdict'].upper()}; {n} measured ({n - args.requests} "
              f"re-measured); baseline TTFT {ttft} ms, decode {decode} tok/s")
        for found in report.get("episodes", {}).values():
            for e in found:
                print(f"    episode {e['first']}–{e['last']}: {e['sentence']}")
        for reason in report.get("verdict_reasons", []):
            print(f"    why: {reason}")
    culprits = {k: v.get("culprit") for k, v in report_attr(loud).items()}
    print(f"attribution's culprit per size: {culprits}")
    (qt, qd), (bt, bd) = medians(quiet), medians(loud)
    if qt and bt and qd and bd:
        print(f"re-measured baseline vs quiet: TTFT {100 * (bt / qt - 1):+.1f} %, decode "
              f"{100 * (bd / qd - 1):+.1f} % (target within ±5 %)")
    return 0


def report_attr(report: dict[str, Any]) -> dict[str, Any]:
    """The report's attribution per prompt size ({} without one)."""
    attr: dict[str, Any] = report.get("attribution") or {}
    return attr


if __name__ == "__main__":
    raise SystemExit(main())
