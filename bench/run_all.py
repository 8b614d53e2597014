"""`make bench`: every benchmark of llmtop's own cost, then one table of metric, measured,
target, met.

    python bench/run_all.py [--quick] [--skip NAME ...] [--markdown FILE]

Each benchmark runs as its own process (so none inherits another's warm state) and writes its
result rows as JSON; this script prints them as one table and says which targets were met.
The machine's load average is printed before and after: every CPU figure here is process CPU
time, and every comparison is paired or interleaved, the only fair measures on a shared
machine, but a heavily loaded one still slows the engine and widens the spread.
The whole run takes about 17–20 minutes on 2 cores (17 min measured before the first-frame
and replay rows, which add about 2; `--quick`: fewer repetitions, ~4 min).
Exit status 0 when every target was met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SPARE_CORE_THREADS = max(1, (os.cpu_count() or 2) - 1)  # the engine's threads, one core left

# name → (argv after the script, quick argv); every one gets --json FILE appended
BENCHES: dict[str, tuple[str, list[str], list[str]]] = {
    "clock": (
        "clock_truth.py",
        ["--requests", "20", "--runs", "8"],
        ["--requests", "10", "--runs", "4"],
    ),
    # the same truth, two CPU burners running through every path (issue #31, item 0)
    "clock-burners": (
        "clock_truth.py",
        ["--burners", "2", "--paths", "ollama,openai,run,bench,load,tui", "--requests", "20",
         "--runs", "8"],
        ["--burners", "2", "--paths", "ollama,openai,run,bench,load,tui", "--requests", "10",
         "--runs", "4"],
    ),
    "cli-start": (
        "cli_start.py",
        ["--rounds", "9"],
        ["--rounds", "5"],
    ),
    # exec → the TUI's prompt drawn, and its first token on screen (a pty, a scripted engine)
    "tui-start": (
        "tui_start.py",
        ["--runs", "7"],
        ["--runs", "3"],
    ),
    "probe": (
        "probe_cost.py",
        ["-n", "40", "--interval", "0.1"],
        ["-n", "15", "--interval", "0.1"],
    ),
    "probe-270": (
        "probe_cost.py",
        ["-n", "40", "--interval", "0.1", "--spawn", "200"],
        ["-n", "15", "--interval", "0.1", "--spawn", "200"],
    ),
    "relay": (
        "relay_overhead.py",
        ["--no-engine", "--rounds", "30"],
        ["--no-engine", "--rounds", "12"],
    ),
    "watch": (
        "watch_overhead.py",
        ["--rounds", "40"],
        ["--rounds", "15"],
    ),
    "tui-scripted": (
        "tui_cost.py",
        ["--scripted", "--pairs", "3", "--num-predict", "300"],
        ["--scripted", "--pairs", "1", "--num-predict", "200"],
    ),
    "tui-engine": (
        "tui_cost.py",
        ["--pairs", "4", "--num-predict", "96", "--session-pairs", "24"],
        ["--pairs", "2", "--num-predict", "48", "--session-pairs", "10"],
    ),
    # llmtop load beside Locust's FastHttpUser, open loop (GuideLLM: bench/load_peers.py alone)
    "load-peers": (
        "load_peers.py",
        ["--tools", "llmtop,locust", "--rates", "25,50,100,200,400", "--seconds", "2"],
        ["--tools", "llmtop,locust", "--rates", "25,100,400", "--seconds", "1"],
    ),
    # load --replay's arrival gaps against the real llama-server, the engine at nice 10 (the
    # generator not queued behind its threads on the same cores), target 1 ms
    "replay-gaps": (
        "replay_gaps.py",
        ["--replays", "5", "--engine-nice", "10"],
        ["--replays", "2", "--engine-nice", "10"],
    ),
    # informational: each llama.cpp configuration's rates, side by side (llama_config.py)
    "llama-configs": (
        "llama_configs.py",
        ["--requests", "6"],
        ["--requests", "3"],
    ),
    # the watch's RSS and open descriptors over 10,000 short requests (quick: projected)
    "watch-soak": (
        "watch_soak.py",
        ["--requests", "10000"],
        ["--quick"],
    ),
    # informational: the decode ratio when the engine leaves the TUI a core (cores − 1 threads)
    "tui-engine-spare-core": (
        "tui_cost.py",
        ["--pairs", "4", "--num-predict", "96", "--num-thread", str(SPARE_CORE_THREADS)],
        ["--pairs", "2", "--num-predict", "48", "--num-thread", str(SPARE_CORE_THREADS)],
    ),
}


def run_one(name: str, quick: bool, folder: str) -> list[dict[str, Any]]:
    """Run one benchmark; its rows, or one row saying it failed and why (the last line it
    wrote to stderr: a traceback's exception). A benchmark that reports a failure of what it
    measures (a configuration that crashes) writes that as a row and exits 0 itself."""
    script, full, short = BENCHES[name]
    out = os.path.join(folder, f"{name}.json")
    argv = [sys.executable, str(HERE / script), *(short if quick else full), "--json", out]
    print(f"\n=== {name}: {' '.join(argv[1:])}", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                            stderr=subprocess.PIPE)
    lines: list[bytes] = []
    echo = threading.Thread(target=echo_stderr, args=(proc, lines), daemon=True)
    echo.start()
    rc = proc.wait()
    echo.join(2.0)  # a grandchild that outlived it may hold the pipe open: not waited for
    last = lines[-1].decode(errors="replace") if lines else ""
    print(f"=== {name}: {time.perf_counter() - t0:.0f} s, exit {rc}", flush=True)
    rows: list[dict[str, Any]] = []
    if os.path.exists(out):
        try:
            rows = json.loads(Path(out).read_text())
        except (OSError, ValueError) as exc:
            last = f"its rows could not be read: {exc}"
    if not rows:
        why = f": {last[:300]}" if last else ""
        return [{"metric": f"{name} (did not finish: exit {rc}{why})", "measured": None,
                 "unit": "", "target": None, "met": False}]
    return rows


def echo_stderr(proc: subprocess.Popen[bytes], last: list[bytes]) -> None:
    """Copy the child's stderr to ours as it comes, keeping its last non-empty line in
    `last` (a thread's target: it ends when every holder of the pipe has closed it)."""
    assert proc.stderr is not None
    for line in proc.stderr:
        sys.stderr.buffer.write(line)
        sys.stderr.buffer.flush()
        if line.strip():
            last[:] = [line.strip()]


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table: metric | measured | target | met."""
    lines = ["| metric | measured | target | met |", "|---|---|---|---|"]
    for r in rows:
        unit = r.get("unit", "")
        measured = "—" if r["measured"] is None else f"{r['measured']:.2f} {unit}".strip()
        op = r.get("target_op", "<=").replace("<=", "≤").replace(">=", "≥")
        target = "—" if r["target"] is None else f"{op} {r['target']:g} {unit}".strip()
        met = "—" if r["met"] is None else "yes" if r["met"] else "NO"  # None: explains a row
        metric = str(r["metric"]).replace("|", "\\|")  # a reason's own bars stay in its cell
        lines.append(f"| {metric} | {measured} | {target} | {met} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks, print the table; exit 0 when every target was met."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--skip", nargs="*", default=[], choices=sorted(BENCHES))
    ap.add_argument("--markdown", help="also write the table here")
    args = ap.parse_args(argv)
    start = os.getloadavg()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="llmtop-bench-") as folder:
        for name in BENCHES:
            if name not in args.skip:
                rows.extend(run_one(name, args.quick, folder))
    end = os.getloadavg()
    text = table(rows)
    load = (f"load average {start[0]:.2f} at the start, {end[0]:.2f} at the end; "
            f"{os.cpu_count()} logical CPUs")
    print(f"\n{text}\n\n{load}")
    if args.markdown:
        Path(args.markdown).write_text(f"{text}\n\n{load}\n", encoding="utf-8")
    return 0 if all(r["met"] is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
