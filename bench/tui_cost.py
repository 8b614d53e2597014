"""What the TUI itself costs: its CPU idle and while streaming, and the engine's decode rate
with the TUI against headless, in interleaved pairs, on the real embedded engine.

    python bench/tui_cost.py [--pairs 4] [--num-predict 160] [--settle-s 5] [--idle-s 10]
                             [--num-thread N] [--json FILE] [--engine-url URL] [--py-spy [S]]

The TUI is the real `llmtop` app in a pseudo-terminal (120×40, xterm-256color) whose output is
read and thrown away as a terminal would draw it; prompts are typed into it. Per pair, in
alternating order: (a) start the TUI against the engine, wait for its session log's header, let
the start-up tail pass (`--settle-s`, 5 s: its first probe samples, the connection's frames, the
garbage collector's freeze; a 2 s window right after the header still reads 2–4 % on 2 cores,
one 5 s after it reads as the rest of the idle time), measure its CPU over `--idle-s` (10)
seconds idle, type the prompt and wait TYPED_S, press Enter and measure its CPU from there until
the request record is in its log, read the engine's decode rate (eval_count / eval_duration, the
server's own figures) from that record, quit; (b) the same request headless: `run_request` on an
`OllamaEngine` in this process, no TUI running; its CPU (this process's, the client alone: HTTP,
parsing, the event loop) is printed as the floor under the TUI's streaming figure. The engine is
one child process (`llmtop engine`) for all.

CPU is the sum over the TUI's threads of the kernel's run time (`TaskClock`: the first field
of /proc/PID/task/TID/schedstat, ns), read at both ends of a window, over the threads alive at
both ends; when the set of threads changed in between, the window falls back to the process's
user+system time (psutil, 10 ms ticks) and says so. Per window it also prints the wake-ups of
the main thread (voluntary context switches per second, /proc/PID/task/TID/status) and the
frames per second (bursts of terminal output, FRAME_GAP_NS apart: Textual writes a frame at
once).
Targets (the "monitor cost" issue): TUI ≤ 5 % of a core streaming, ≤ 1 % idle; decode rate
with the TUI / headless ≥ 0.98 (median of the paired ratios); with 2 pairs or more it also
prints the 95 % confidence interval of their geometric mean and how many pairs would narrow it
to ±2 % at the spread seen (`ratio_interval`).
`--session-pairs N` adds N pairs made request by request inside one TUI, for the decode
ratio alone: in one running TUI, the prompt typed and sent, then the same request headless
while the TUI idles (and the other way round every second pair, so a drift in the engine's
rate cancels), each ~2 × a request's time instead of a fresh TUI's ~45 s; their ratios are the
"in one TUI" rows, with the 95 % interval, so a 2 % effect can be resolved in minutes.
`--num-thread N` passes Ollama's num_thread to the TUI and to the headless requests alike;
with it the rows are informational (the TUI's interference when the engine leaves it a core).
`--scripted` streams from bench/truth_server.py at 50 chunks/s instead (the TUI's CPU alone,
no decode ratio): for a machine too busy to run the model at a steady rate.
`--py-spy [SECONDS]` also records the first TUI streaming request with py-spy (when on PATH)
for SECONDS (6) into tui-profile.txt (raw, one stack per line, threads apart), for finding what
costs.
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
from cputime import thread_stats

import llmtop
from llmtop.engines.ollama import OllamaEngine
from llmtop.servers.child import EmbeddedProcess
from llmtop.sessions.measure.request import RequestCollector, chat_messages, run_request

MODEL = "gemma3:270m"
PROMPT = "Write a long story about a lighthouse keeper and a storm, in plain sentences."
TYPED_S = 1.0  # after typing the prompt: its keystrokes drawn before the streaming window
LLMTOP_ROOT = str(Path(llmtop.__file__).resolve().parent.parent)  # the llmtop measured
READY_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 120.0


FRAME_GAP_NS = 10_000_000  # pty output after a pause this long starts a new frame (Textual
# writes each frame at once; frames are ≥ 1/60 s apart)


class Window:
    """CPU and wake-ups of the TUI over a window: `Window(app)` starts it, `end()` closes it.

    cpu_pct: % of one core, the sum over the threads alive at the end (schedstat, ns): for
    one alive at the start too, its run time between the two reads; for one started inside
    the window (the connection's reader thread, at the request's first write), all of its run
    time. When a thread ended inside the window its time is lost, so the figure is then the
    process's user+system time (psutil, 10 ms ticks; `fallback` is True). wakeups: per
    thread name, voluntary context switches per second; threads: per thread name, % of a
    core."""

    def __init__(self, app: PtyApp) -> None:
        self.app = app
        self.t0 = time.perf_counter_ns()
        self.frames0 = app.frames
        self.frames_per_s = 0.0
        self.before = thread_stats(app.proc.pid)
        self.cpu0 = app.cpu_s()
        self.cpu_pct = 0.0
        self.fallback = False
        self.threads: dict[str, float] = {}
        self.wakeups: dict[str, float] = {}

    def end(self) -> Window:
        """Close the window (read both clocks now); returns self."""
        after = thread_stats(self.app.proc.pid)
        cpu1 = self.app.cpu_s()
        wall_s = (time.perf_counter_ns() - self.t0) / 1e9
        for tid, b in after.items():
            a = self.before.get(tid)
            run0, woke0 = (a.run_ns, a.wakeups) if a is not None else (0, 0)  # born inside
            name = "MainThread" if tid == self.app.proc.pid else f"{b.name}:{tid}"
            self.threads[name] = self.threads.get(name, 0.0) + (b.run_ns - run0) / 1e7 / wall_s
            self.wakeups[name] = self.wakeups.get(name, 0.0) + (b.wakeups - woke0) / wall_s
        self.fallback = not set(self.before) <= set(after)  # a thread ended: its time is lost
        self.frames_per_s = (self.app.frames - self.frames0) / wall_s
        self.cpu_pct = ((cpu1 - self.cpu0) * 100 / wall_s if self.fallback
                        else sum(self.threads.values()))
        return self

    def describe(self) -> str:
        """"7.12 % (main 5.40 %, 41 wake-ups/s; 5.0 frames/s)" and the fallback when used."""
        text = (f"{self.cpu_pct:.2f} % (main {self.threads.get('MainThread', 0):.2f} %, "
                f"{self.wakeups.get('MainThread', 0):.0f} wake-ups/s; "
                f"{self.frames_per_s:.1f} frames/s)")
        return text + (" [a thread ended: psutil's process time]" if self.fallback else "")


class PtyApp:
    """The TUI as a child process on a pseudo-terminal; its output is drained by a thread.
    It runs the llmtop this script imported (LLMTOP_ROOT first on its path), from `cwd`:
    `python -m` puts the working directory first, so a checkout there would be run instead."""

    def __init__(self, argv: list[str], cwd: str, cols: int = 120, rows: int = 40) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        path = os.pathsep.join(p for p in (LLMTOP_ROOT, os.environ.get("PYTHONPATH")) if p)
        env = dict(os.environ, TERM="xterm-256color", COLORTERM="truecolor", PYTHONPATH=path)
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                                     cwd=cwd, start_new_session=True, close_fds=True)
        os.close(slave)
        self.master = master
        self.bytes_out = 0
        self.frames = 0  # bursts of output (FRAME_GAP_NS apart): the frames Textual wrote
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        self.ps = psutil.Process(self.proc.pid)

    def _drain(self) -> None:
        last_ns = 0
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            self.bytes_out += len(data)
            now_ns = time.perf_counter_ns()
            self.frames += now_ns - last_ns > FRAME_GAP_NS
            last_ns = now_ns

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


def tui_argv(host: str, args: argparse.Namespace, log: Path) -> list[str]:
    """The TUI's command line: the engine at `host`, the bench's model and sampling, its log
    at `log`."""
    argv = [sys.executable, "-m", "llmtop", "--engine", "ollama", "--host", host, "--model",
            args.model, "--log", str(log), "--num-predict", str(args.num_predict), "--temperature",
            "0", "--seed", "7"]
    if args.num_thread is not None:
        argv += ["--num-thread", str(args.num_thread)]
    return argv


def tui_turn(host: str, args: argparse.Namespace, folder: str, i: int,
             profile: bool) -> dict[str, Any]:
    """One TUI run: idle and streaming `Window`s, decode tok/s, tokens."""
    log = Path(folder) / f"tui-{i}.jsonl"
    app = PtyApp(tui_argv(host, args, log), cwd=folder)
    try:
        _wait_for(log, "header", 1, READY_TIMEOUT_S)
        time.sleep(args.settle_s)  # the start-up tail (see the docstring)
        idle = Window(app)
        time.sleep(args.idle_s)
        idle.end()
        app.type(PROMPT)  # typed first: 70-odd keystrokes at once are not the stream's cost
        time.sleep(TYPED_S)
        spy = _start_spy(app.proc.pid, args.py_spy) if profile else None
        streaming = Window(app)
        app.type("\r")
        record = _wait_for(log, "request", 1, REQUEST_TIMEOUT_S)[0]
        streaming.end()
        if spy is not None:
            spy.wait(args.py_spy + 30)
        return {"idle": idle, "streaming": streaming, "decode": _decode_tps(record["stats"]),
                "tokens": (record["stats"] or {}).get("eval_count")}
    finally:
        app.quit()


def _start_spy(pid: int, seconds: int) -> subprocess.Popen[bytes] | None:
    spy = shutil.which("py-spy")
    if spy is None:
        print("py-spy is not on PATH: no profile")
        return None
    out = Path("tui-profile.txt").resolve()
    print(f"py-spy: recording the TUI into {out}")
    argv = [spy, "record", "-p", str(pid), "-d", str(seconds), "-r", "200", "-f", "raw",
            "-o", str(out), "--nonblocking", "--threads"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def headless_turn(host: str, args: argparse.Namespace) -> tuple[float | None, float]:
    """The same request with no TUI: the engine's decode tok/s, and this process's CPU while
    it streamed (% of a core: the client alone, on a new connection as the TUI's first)."""
    engine = OllamaEngine(host)
    options: dict[str, Any] = {"num_predict": args.num_predict, "temperature": 0.0, "seed": 7}
    if args.num_thread is not None:
        options["num_thread"] = args.num_thread
    try:
        collector = RequestCollector(prompt=PROMPT, options=options, model=args.model)
        c0, w0 = time.process_time(), time.perf_counter()
        result = await run_request(
            lambda: engine.stream_chat(args.model, chat_messages(PROMPT), options=options),
            collector)
        cpu = (time.process_time() - c0) / (time.perf_counter() - w0) * 100
    finally:
        await engine.aclose()
    return _decode_tps(result.stats.to_dict() if result.stats else None), cpu


async def session_pairs(host: str, args: argparse.Namespace, folder: str) -> list[float]:
    """`args.session_pairs` paired ratios (TUI / headless decode tok/s) inside one TUI, the
    order alternating pair by pair (module docstring)."""
    log = Path(folder) / "tui-session.jsonl"
    app = PtyApp(tui_argv(host, args, log), cwd=folder)
    ratios: list[float] = []
    sent = 0

    def tui_request() -> float | None:
        nonlocal sent
        app.type(PROMPT)
        time.sleep(TYPED_S)
        app.type("\r")
        sent += 1
        record = _wait_for(log, "request", sent, REQUEST_TIMEOUT_S)[sent - 1]
        time.sleep(0.5)  # the request's last frames: the TUI is idle for the headless one
        return _decode_tps(record["stats"])

    try:
        await asyncio.to_thread(_wait_for, log, "header", 1, READY_TIMEOUT_S)
        await asyncio.sleep(args.settle_s)
        for i in range(args.session_pairs):
            if i % 2 == 0:
                tui = await asyncio.to_thread(tui_request)
                head, _ = await headless_turn(host, args)
            else:
                head, _ = await headless_turn(host, args)
                tui = await asyncio.to_thread(tui_request)
            if tui and head:
                ratios.append(tui / head)
                print(f"session pair {i}: TUI {tui:.1f} tok/s, headless {head:.1f} tok/s, "
                      f"ratio {tui / head:.3f}", flush=True)
    finally:
        app.quit()
    return ratios


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
                                   "headless_decode": [], "ratio": [], "client": [],
                                   "frames": [], "wakeups": [], "session_ratio": []}
    try:
        await headless_turn(host, args)  # warm-up: model loaded, caches warm
        for i in range(args.pairs):
            first_tui = i % 2 == 0
            if not first_tui:
                head, client = await headless_turn(host, args)
            tui = await asyncio.to_thread(tui_turn, host, args, folder, i,
                                          args.py_spy is not None and i == 0)
            if first_tui:
                head, client = await headless_turn(host, args)
            idle, streaming = tui["idle"], tui["streaming"]
            print(f"pair {i}: TUI idle {idle.describe()}\n        streaming "
                  f"{streaming.describe()}\n        decode {tui['decode'] or 0:.1f} tok/s "
                  f"({tui['tokens']} tokens) vs headless {head or 0:.1f} tok/s; headless client "
                  f"CPU {client:.2f} %\n        streaming by thread: "
                  + ", ".join(f"{k} {v:.2f} %" for k, v in sorted(
                      streaming.threads.items(), key=lambda kv: -kv[1]) if v >= 0.01),
                  flush=True)
            out["client"].append(client)
            out["idle"].append(idle.cpu_pct)
            out["streaming"].append(streaming.cpu_pct)
            out["frames"].append(streaming.frames_per_s)
            out["wakeups"].append(streaming.wakeups.get("MainThread", 0.0))
            if tui["decode"] and head:
                out["tui_decode"].append(float(tui["decode"]))
                out["headless_decode"].append(head)
                out["ratio"].append(float(tui["decode"]) / head)
        if args.session_pairs and not args.scripted:
            out["session_ratio"] = await session_pairs(host, args, folder)
    finally:
        if engine is not None:
            engine.stop()
    if args.scripted:
        out["ratio"] = out["tui_decode"] = out["headless_decode"] = []  # the script's own rate
    return out


def rows(out: dict[str, list[float]], source: str,
         num_thread: int | None = None) -> list[dict[str, Any]]:
    """The result rows for bench/run_all.py (`source`: what streamed, for the metric names).
    With `num_thread` only the decode ratio, as an informational row (no target)."""
    if num_thread is not None:
        if not out["ratio"]:
            return []
        return [{"metric": f"decode rate, TUI / headless, engine at num_thread {num_thread} "
                           "(informational)", "measured": statistics.median(out["ratio"]),
                 "unit": "×", "target": None, "met": None}]  # None: informational
    idle, streaming = statistics.median(out["idle"]), statistics.median(out["streaming"])
    result = [
        {"metric": f"TUI CPU streaming, {source} (% of a core)", "measured": streaming,
         "unit": "%", "target": 5.0, "met": streaming <= 5.0},
        {"metric": f"TUI CPU idle, {source} (% of a core)", "measured": idle, "unit": "%",
         "target": 1.0, "met": idle <= 1.0},
    ]
    session = out.get("session_ratio") or []
    if out["ratio"]:  # with pairs in one TUI, these few fresh-TUI pairs are for information
        ratio = statistics.median(out["ratio"])
        target = None if session else 0.98
        result.append({"metric": "decode rate, TUI / headless (paired median)"
                       + (", fresh TUIs (informational)" if session else ""),
                       "measured": ratio, "unit": "×", "target": target, "target_op": ">=",
                       "met": None if session else ratio >= 0.98})
        interval = ratio_interval(out["ratio"])
        if interval is not None:
            low, high, needed = interval
            print(f"decode rate, TUI / headless: 95 % CI [{low:.3f}, {high:.3f}] × "
                  f"(geometric mean of {len(out['ratio'])} paired ratios); pairs needed for "
                  f"±2 % at this spread: {needed}")
            result.append({"metric": "decode rate, TUI / headless, 95 % CI's lower end "
                           "(informational)", "measured": low, "unit": "×", "target": None,
                           "met": None})
    if session:
        ratio = statistics.median(session)
        result.append({"metric": f"decode rate, TUI / headless, {len(session)} pairs in one TUI "
                       "(paired median)", "measured": ratio, "unit": "×", "target": 0.98,
                       "target_op": ">=", "met": ratio >= 0.98})
        interval = ratio_interval(session)
        if interval is not None:
            low, high, needed = interval
            print(f"decode rate in one TUI: 95 % CI [{low:.3f}, {high:.3f}] × (geometric mean "
                  f"of {len(session)} paired ratios); pairs needed for ±2 %: {needed}")
            result += [{"metric": "decode rate in one TUI, 95 % CI's lower end (informational)",
                        "measured": low, "unit": "×", "target": None, "met": None},
                       {"metric": "decode rate in one TUI, 95 % CI's upper end (informational)",
                        "measured": high, "unit": "×", "target": None, "met": None}]
    return result


def ratio_interval(ratios: list[float]) -> tuple[float, float, int] | None:
    """(low, high, pairs needed): the 95 % confidence interval of the geometric mean of paired
    ratios (Student's t on their logarithms, which makes TUI/headless and headless/TUI
    symmetric), and how many pairs would bring its half-width to ±2 % at the same spread
    ((t·sd / ln 1.02)², t at 95 % two-sided with the pairs given). None for fewer than 2."""
    import math

    from scipy.stats import t as student_t

    if len(ratios) < 2:
        return None
    logs = [math.log(r) for r in ratios]
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    t = float(student_t.ppf(0.975, len(logs) - 1))
    half = t * sd / math.sqrt(len(logs))
    needed = math.ceil((t * sd / math.log(1.02)) ** 2) if sd > 0 else len(logs)
    return math.exp(mean - half), math.exp(mean + half), needed


def main(argv: list[str] | None = None) -> int:
    """Run the pairs; print them and the medians; write the rows as JSON with --json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--num-predict", type=int, default=160)
    ap.add_argument("--settle-s", type=float, default=5.0,
                    help="seconds after the log header before the idle window (5)")
    ap.add_argument("--idle-s", type=float, default=10.0, help="the idle window, s (10)")
    ap.add_argument("--session-pairs", type=int, default=0,
                    help="pairs made request by request inside one TUI (the decode ratio)")
    ap.add_argument("--num-thread", type=int, help="Ollama's num_thread for every request")
    ap.add_argument("--engine-url", help="an Ollama-API server serving gemma3:270m already")
    ap.add_argument("--scripted", action="store_true", help="a scripted 50 tok/s server")
    ap.add_argument("--py-spy", type=int, nargs="?", const=6, default=None, metavar="SECONDS",
                    help="profile the first TUI request for SECONDS (6)")
    ap.add_argument("--json", help="write the result rows here")
    args = ap.parse_args(argv)
    args.model = "truth:latest" if args.scripted else MODEL
    print("load average at start: " + " ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)
    with tempfile.TemporaryDirectory(prefix="llmtop-tui-") as folder:
        out = asyncio.run(measure(args, folder))
    print("load average at end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    result = rows(out, "scripted 50 tok/s" if args.scripted else "real engine",
                  args.num_thread)
    for row in result:
        print(f"{row['metric']}: {row['measured']:.3f} (target {row['target']})")
    print(f"headless client CPU, the floor under the streaming figure (% of a core, median): "
          f"{statistics.median(out['client']):.3f}")
    print(f"streaming, medians: TUI CPU {statistics.median(out['streaming']):.2f} %, "
          f"idle {statistics.median(out['idle']):.2f} %, "
          f"{statistics.median(out['frames']):.1f} frames/s, main thread "
          f"{statistics.median(out['wakeups']):.0f} wake-ups/s")
    if args.json:
        Path(args.json).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
