"""What the TUI itself costs: its CPU idle and while streaming, and the engine's decode rate
with the TUI against headless, in interleaved pairs, on the real embedded engine.

    python bench/tui_cost.py [--pairs 4] [--num-predict 160] [--idle-s 3] [--json FILE]
                             [--engine-url URL] [--py-spy SECONDS]

The TUI is the real `llmtop` app in a pseudo-terminal (120×40, xterm-256color) whose output
is read and thrown away as a terminal would draw it; prompts are typed into it. Per pair, in
alternating order: (a) start the TUI against the engine, wait for its session log's header,
measure its own CPU (process user+system time, all its threads: the probe sampler too) over
`--idle-s` seconds idle, type the prompt, measure its CPU until the request record is in its
log, read the engine's decode rate (eval_count / eval_duration, the server's own figures)
from that record, quit; (b) the same request headless: `run_request` on an `OllamaEngine` in
this process, no TUI running. The engine is one child process (`llmtop engine`) for all.
Targets (the "monitor cost" issue): TUI ≤ 5 % of a core streaming, ≤ 1 % idle; decode rate
with the TUI / headless ≥ 0.98 (median of the paired ratios).
`--scripted` streams from bench/truth_server.py at 50 chunks/s instead (the TUI's CPU alone,
no decode ratio): for a machine too busy to run the model at a steady rate.
`--py-spy` also records the first TUI streaming request with py-spy (when on PATH) into
tui-profile.txt, for finding what costs.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import pty
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from clock_truth import Truth

from llmtop.engines.child import EmbeddedProcess
from llmtop.engines.ollama import OllamaEngine
from llmtop.sessions.request import RequestCollector, chat_messages, run_request

MODEL = "gemma3:270m"
PROMPT = "Write a long story about a lighthouse keeper and a storm, in plain sentences."
READY_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 120.0


class PtyApp:
    """The TUI as a child process on a pseudo-terminal; its output is drained by a thread."""

    def __init__(self, argv: list[str], cols: int = 120, rows: int = 40) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = dict(os.environ, TERM="xterm-256color", COLORTERM="truecolor")
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                                     start_new_session=True, close_fds=True)
        os.close(slave)
        self.master = master
        self.bytes_out = 0
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        self.ps = psutil.Process(self.proc.pid)

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            self.bytes_out += len(data)

    def type(self, text: str) -> None:
        """Send keystrokes (text, "\\r" for Enter, "\\x11" for Ctrl+Q)."""
        os.write(self.master, text.encode())

    def cpu_s(self) -> float:
        """The TUI process's user + system CPU seconds so far (all threads)."""
        t = self.ps.cpu_times()
        return t.user + t.system

    def quit(self) -> None:
        """Ctrl+Q, then wait; killed if it does not leave."""
        self.type("\x11")
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        os.close(self.master)


def _records(log: Path, kind: str) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec.get("type") == kind:
            out.append(rec)
    return out


def _wait_for(log: Path, kind: str, count: int, timeout_s: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = _records(log, kind)
        if len(found) >= count:
            return found
        time.sleep(0.05)
    kinds = [r.get("type") for r in _records(log, "header")] + [
        json.loads(line).get("type") for line in log.read_text().splitlines()[1:]
    ] if log.exists() else []
    raise TimeoutError(f"no {kind} record in {log} after {timeout_s:g} s (records: {kinds})")


def _decode_tps(stats: dict[str, Any] | None) -> float | None:
    if not stats or not stats.get("eval_count") or not stats.get("eval_duration"):
        return None
    return stats["eval_count"] / (stats["eval_duration"] / 1e9)


def tui_turn(host: str, args: argparse.Namespace, folder: str, i: int,
             profile: bool) -> dict[str, float | None]:
    """One TUI run: idle CPU %, streaming CPU %, decode tok/s."""
    log = Path(folder) / f"tui-{i}.jsonl"
    argv = [sys.executable, "-m", "llmtop", "--engine", "ollama", "--host", host, "--model",
            args.model, "--log", str(log), "--num-predict", str(args.num_predict), "--temperature",
            "0", "--seed", "7"]
    app = PtyApp(argv)
    try:
        _wait_for(log, "header", 1, READY_TIMEOUT_S)
        time.sleep(1.5)  # the first frames after connecting
        c0, w0 = app.cpu_s(), time.perf_counter()
        time.sleep(args.idle_s)
        idle = (app.cpu_s() - c0) / (time.perf_counter() - w0) * 100
        spy = _start_spy(app.proc.pid, folder) if profile else None
        c0, w0 = app.cpu_s(), time.perf_counter()
        app.type(PROMPT + "\r")
        record = _wait_for(log, "request", 1, REQUEST_TIMEOUT_S)[0]
        streaming = (app.cpu_s() - c0) / (time.perf_counter() - w0) * 100
        if spy is not None:
            spy.wait(60)
        return {"idle": idle, "streaming": streaming, "decode": _decode_tps(record["stats"]),
                "tokens": (record["stats"] or {}).get("eval_count")}
    finally:
        app.quit()


def _start_spy(pid: int, folder: str) -> subprocess.Popen[bytes] | None:
    spy = shutil.which("py-spy")
    if spy is None:
        print("py-spy is not on PATH: no profile")
        return None
    out = Path("tui-profile.txt").resolve()
    print(f"py-spy: recording the TUI into {out}")
    return subprocess.Popen([spy, "record", "-p", str(pid), "-d", "6", "-r", "200", "-f", "raw",
                             "-o", str(out), "--nonblocking", "--threads"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def headless_turn(host: str, args: argparse.Namespace) -> float | None:
    """The same request with no TUI: the engine's decode tok/s."""
    engine = OllamaEngine(host)
    options = {"num_predict": args.num_predict, "temperature": 0.0, "seed": 7}
    try:
        collector = RequestCollector(prompt=PROMPT, options=options, model=args.model)
        result = await run_request(
            lambda: engine.stream_chat(args.model, chat_messages(PROMPT), options=options),
            collector)
    finally:
        await engine.aclose()
    return _decode_tps(result.stats.to_dict() if result.stats else None)


async def measure(args: argparse.Namespace, folder: str) -> dict[str, list[float]]:
    """The interleaved pairs; returns idle/streaming CPU %, decode rates and paired ratios."""
    engine: Any = None
    host = args.engine_url
    if args.scripted:
        engine = Truth(folder, "--chunks", str(args.num_predict), "--gap-ms", "20")
        host = engine.url
    elif host is None:
        engine = EmbeddedProcess()
        await engine.start()
        host = engine.host
    out: dict[str, list[float]] = {"idle": [], "streaming": [], "tui_decode": [],
                                   "headless_decode": [], "ratio": []}
    try:
        await headless_turn(host, args)  # warm-up: model loaded, caches warm
        for i in range(args.pairs):
            first_tui = i % 2 == 0
            if not first_tui:
                head = await headless_turn(host, args)
            tui = await asyncio.to_thread(tui_turn, host, args, folder, i,
                                          args.py_spy and i == 0)
            if first_tui:
                head = await headless_turn(host, args)
            print(f"pair {i}: TUI idle {tui['idle']:.2f} %, streaming {tui['streaming']:.2f} %, "
                  f"decode {tui['decode'] or 0:.1f} tok/s ({tui['tokens']} tokens) vs headless "
                  f"{head or 0:.1f} tok/s", flush=True)
            out["idle"].append(float(tui["idle"] or 0))
            out["streaming"].append(float(tui["streaming"] or 0))
            if tui["decode"] and head:
                out["tui_decode"].append(float(tui["decode"]))
                out["headless_decode"].append(head)
                out["ratio"].append(float(tui["decode"]) / head)
    finally:
        if engine is not None:
            engine.stop()
    if args.scripted:
        out["ratio"] = out["tui_decode"] = out["headless_decode"] = []  # the script's own rate
    return out


def rows(out: dict[str, list[float]], source: str) -> list[dict[str, Any]]:
    """The result rows for bench/run_all.py (`source`: what streamed, for the metric names)."""
    idle, streaming = statistics.median(out["idle"]), statistics.median(out["streaming"])
    result = [
        {"metric": f"TUI CPU streaming, {source} (% of a core)", "measured": streaming,
         "unit": "%", "target": 5.0, "met": streaming <= 5.0},
        {"metric": f"TUI CPU idle, {source} (% of a core)", "measured": idle, "unit": "%",
         "target": 1.0, "met": idle <= 1.0},
    ]
    if out["ratio"]:
        ratio = statistics.median(out["ratio"])
        result.append({"metric": "decode rate, TUI / headless (paired median)",
                       "measured": ratio, "unit": "×", "target": 0.98, "target_op": ">=",
                       "met": ratio >= 0.98})
    return result


def main(argv: list[str] | None = None) -> int:
    """Run the pairs; print them and the medians; write the rows as JSON with --json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--num-predict", type=int, default=160)
    ap.add_argument("--idle-s", type=float, default=3.0)
    ap.add_argument("--engine-url", help="an Ollama-API server serving gemma3:270m already")
    ap.add_argument("--scripted", action="store_true", help="a scripted 50 tok/s server")
    ap.add_argument("--py-spy", action="store_true", help="profile the first TUI request")
    ap.add_argument("--json", help="write the result rows here")
    args = ap.parse_args(argv)
    args.model = "truth:latest" if args.scripted else MODEL
    print("load average at start: " + " ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)
    with tempfile.TemporaryDirectory(prefix="llmtop-tui-") as folder:
        out = asyncio.run(measure(args, folder))
    print("load average at end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    result = rows(out, "scripted 50 tok/s" if args.scripted else "real engine")
    for row in result:
        print(f"{row['metric']}: {row['measured']:.3f} (target {row['target']})")
    if args.json:
        Path(args.json).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
