"""How long the TUI takes to show its prompt, and its first token, from exec, as a user sees it.

    python bench/tui_start.py [--runs 7] [--compare ROOT] [--json FILE]

The TUI is the real `llmtop` (no command) in a pseudo-terminal (120×40, xterm-256color)
against a scripted Ollama-API server already answering (`llmtop.testing.scripted`, its own
process, the "timed" model: first chunk "t0" after 1 ms). It is started the way a user starts
it with an address and nothing else (`llmtop --host URL --model timed`): the engine kind is
decided by llmtop (engine "auto"), so the rows include that decision. A thread reads the
terminal's bytes as they come and stamps each read with `perf_counter_ns` (the monotonic
clock the exec was stamped on); the text is the bytes with the terminal's control sequences
(CSI, OSC, other ESC pairs) taken out, which is what the screen shows, in the order it is
drawn. Two moments per run:

- first frame: the prompt box's placeholder ("Enter sends") is in the output: the screen
  the user types into is drawn. Target ≤ TARGET_FIRST_FRAME_MS (a "top" opens in well under a
  second);
- whole screen: the footer's first key ("Bench") is on screen. The parts the first frame does
  without (the metrics' and the session's rows, the footer, the hidden panels: see
  tui/screens/later.py) are mounted just after it, the footer last. No target;
- first token: the prompt "hi" and Enter are typed the moment the prompt is seen (as a user
  who typed ahead would); the first chunk's text ("t0") is on screen (counted from exec, so
  the connection, the session log's opening and the request are all in it). No target.

Beside llmtop, in the same rounds, the floor: a bare Textual app (`BARE_APP`: a header line,
a body and an input box with the same placeholder; no llmtop module) started the same way,
to its first frame. On a shared VM the same llmtop's median moves by ±20 % from one minute
to the next (417 and 584 ms in two rounds a minute apart); the floor moves with it, and
llmtop's rows are read against it (the `×` row: llmtop's median over the floor's).

Each run is a fresh process; the first run warms the page cache and is not counted. The
child runs as an installed llmtop does, from bytecode (pip compiles it at install): its
`.pyc` files go to a folder of the bench's own (PYTHONPYCACHEPREFIX, written by the first
run; PYTHONDONTWRITEBYTECODE, which this project's shells set, is dropped for the child),
else every start compiles llmtop's ~110 modules from source, ~0.25 s of CPU. With
`--compare ROOT` (another checkout of llmtop, e.g. a `git worktree` of an older commit) the
runs alternate between that llmtop and this one, run by run, so a machine whose load drifts
does not favour either; each gets its rows, medians over `--runs` runs. The load average is
printed with the rows: on a shared 2-core machine the other processes' CPU is in every figure.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import re
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

HERE = Path(__file__).resolve().parent
THIS_ROOT = str(HERE.parent)
TARGET_FIRST_FRAME_MS = 500.0
PROMPT_TEXT = "Enter sends"  # in the prompt box's placeholder (tui/screens/main.py)
TOKEN_TEXT = "t0"  # the scripted "timed" reply's first chunk (llmtop/testing/scripted.py)
WHOLE_TEXT = "Bench"  # the footer's first key (Ctrl+B, tui/app.py), the last part mounted
# The floor: Textual's own start to a first frame with the same placeholder, no llmtop module
BARE_APP = f"""
from textual.app import App
from textual.widgets import Input, Static

class Bare(App):
    BINDINGS = [("ctrl+q", "quit")]

    def compose(self):
        yield Static("header")
        yield Static("body")
        yield Input(placeholder="prompt — {PROMPT_TEXT}")

Bare().run()
"""
TIMEOUT_S = 30.0
# CSI (ESC [ … final), OSC (ESC ] … BEL or ESC \), DCS/APC strings, then any other ESC pair
CONTROL = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"
                     rb"|\x1b[P_^][^\x1b]*\x1b\\|\x1b[@-Z\\-_]|[\x00-\x08\x0b-\x1f\x7f]")


class Screen:
    """The terminal's output read by a thread: `text` is what was drawn so far (control
    sequences out), `stamps` the perf_counter_ns of each read with the text's length then."""

    def __init__(self, master: int) -> None:
        self.master = master
        self.raw = bytearray()
        self.stamps: list[tuple[int, int]] = []  # (ns, len(text) after that read)
        self.text = ""
        self.changed = threading.Condition()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                break
            if not data:
                break
            now = time.perf_counter_ns()
            with self.changed:
                self.raw += data
                self.text = CONTROL.sub(b"", bytes(self.raw)).decode("utf-8", "replace")
                self.stamps.append((now, len(self.text)))
                self.changed.notify_all()
        with self.changed:
            self.stamps.append((-1, -1))  # closed
            self.changed.notify_all()

    def wait_for(self, needle: str, after: int = 0, timeout_s: float = TIMEOUT_S) -> int:
        """The perf_counter_ns of the read that put `needle` on screen past text offset
        `after`; raises TimeoutError naming what was drawn when it does not come."""
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while True:
                at = self.text.find(needle, after)
                if at >= 0:
                    end = at + len(needle)
                    return next(ns for ns, length in self.stamps if length >= end)
                if self.stamps and self.stamps[-1][0] == -1:
                    raise TimeoutError(f"the TUI exited before {needle!r}: {self.text[-400:]!r}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no {needle!r} after {timeout_s:g} s: "
                                       f"{self.text[-400:]!r}")
                self.changed.wait(left)


def child_env(root: str, folder: str) -> dict[str, str]:
    """The child's environment: a 256-colour terminal, llmtop from `root`, its bytecode
    cached under `folder` (written by the first run)."""
    env = dict(os.environ, TERM="xterm-256color", COLORTERM="truecolor", PYTHONPATH=root,
               NO_PROXY="127.0.0.1", PYTHONPYCACHEPREFIX=os.path.join(folder, "pycache"))
    env.pop("OLLAMA_HOST", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def start(argv: list[str], env: dict[str, str], cwd: str) -> tuple[subprocess.Popen[bytes],
                                                                   Screen, int]:
    """`argv` started in a 120×40 pseudo-terminal: (process, its screen, exec's stamp ns)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    t0 = time.perf_counter_ns()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd,
                            start_new_session=True, close_fds=True)
    os.close(slave)
    return proc, Screen(master), t0


def stop(proc: subprocess.Popen[bytes], screen: Screen) -> None:
    """Ctrl+Q, then the process's end (killed after 15 s)."""
    os.write(screen.master, b"\x11")
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
    os.close(screen.master)


def bare_run(folder: str) -> float:
    """exec → the bare Textual app's first frame (the floor), ms."""
    proc, screen, t0 = start([sys.executable, "-c", BARE_APP], child_env(THIS_ROOT, folder),
                             THIS_ROOT)
    try:
        return (screen.wait_for(PROMPT_TEXT) - t0) / 1e6
    finally:
        stop(proc, screen)


def one_run(root: str, url: str, folder: str) -> tuple[float, float, float]:
    """(exec → prompt on screen, exec → first token on screen, exec → the whole screen), ms,
    for the llmtop at `root` (its bytecode cached under `folder`)."""
    argv = [sys.executable, "-m", "llmtop", "--host", url, "--model", "timed",
            "--log", os.path.join(folder, f"tui-{time.perf_counter_ns()}.jsonl")]
    proc, screen, t0 = start(argv, child_env(root, folder), root)
    try:
        prompt_ns = screen.wait_for(PROMPT_TEXT)
        typed_at = len(screen.text)
        os.write(screen.master, b"hi\r")
        token_ns = screen.wait_for(TOKEN_TEXT, after=typed_at)
        whole_ns = screen.wait_for(WHOLE_TEXT)  # long drawn by now: its read's stamp
    finally:
        stop(proc, screen)
    return (prompt_ns - t0) / 1e6, (token_ns - t0) / 1e6, (whole_ns - t0) / 1e6


def scripted_engine() -> tuple[subprocess.Popen[bytes], str]:
    """The scripted Ollama-API server in its own process, answering; (process, its URL)."""
    sys.path.insert(0, THIS_ROOT)
    from llmtop.servers.child import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "llmtop.testing.scripted", "--port",
                             str(port), "--first-ms", "1", "--chunks", "20", "--gap-ms", "1"],
                            cwd=THIS_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    import urllib.request

    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{url}/api/version", timeout=1):
                return proc, url
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("the scripted engine did not start") from None
            time.sleep(0.05)


def rows_for(label: str, frames: list[float], tokens: list[float],
             wholes: list[float]) -> list[dict[str, Any]]:
    """The three rows of one llmtop: medians, with the runs' range in the metric's name."""
    first = statistics.median(frames)

    def spread(values: list[float]) -> str:
        return f"median of {len(values)}, {min(values):.0f}–{max(values):.0f} ms"

    return [
        {"metric": f"TUI{label}: exec → first frame with the prompt ({spread(frames)})",
         "measured": first, "unit": "ms", "target": TARGET_FIRST_FRAME_MS,
         "met": first <= TARGET_FIRST_FRAME_MS},
        {"metric": f"TUI{label}: exec → the whole screen, footer drawn ({spread(wholes)})",
         "measured": statistics.median(wholes), "unit": "ms", "target": None, "met": None},
        {"metric": f"TUI{label}: exec → first token on screen ({spread(tokens)})",
         "measured": statistics.median(tokens), "unit": "ms", "target": None, "met": None},
    ]


def rounds(roots: dict[str, str], url: str, folder: str, runs: int
           ) -> tuple[dict[str, tuple[list[float], list[float], list[float]]], list[float]]:
    """`runs` rounds, each llmtop (in alternating order) then the floor once: per label its
    (first frames, first tokens, whole screens), and the floor's first frames, ms."""
    results: dict[str, tuple[list[float], list[float], list[float]]] = {
        k: ([], [], []) for k in roots}
    floor: list[float] = []
    for root in roots.values():
        one_run(root, url, folder)  # the page cache warmed, not counted
    bare_run(folder)
    for i in range(runs):
        for label in list(roots) if i % 2 == 0 else list(reversed(roots)):
            frame, token, whole = one_run(roots[label], url, folder)
            for values, value in zip(results[label], (frame, token, whole), strict=True):
                values.append(value)
            print(f"run {i + 1}{label}: first frame {frame:.0f} ms, whole screen "
                  f"{whole:.0f} ms, first token {token:.0f} ms", flush=True)
        floor.append(bare_run(folder))
        print(f"run {i + 1}: a bare Textual app's first frame {floor[-1]:.0f} ms", flush=True)
    return results, floor


def floor_rows(results: dict[str, tuple[list[float], list[float], list[float]]],
               floor: list[float]) -> list[dict[str, Any]]:
    """The floor's row and each llmtop's first frame over it (medians), no targets."""
    base = statistics.median(floor)
    rows: list[dict[str, Any]] = [
        {"metric": f"the floor: a bare Textual app, exec → first frame (median of {len(floor)},"
                   f" {min(floor):.0f}–{max(floor):.0f} ms)",
         "measured": base, "unit": "ms", "target": None, "met": None}]
    for label, (frames, _, _) in results.items():
        rows.append({"metric": f"TUI{label}: first frame over the floor's (medians)",
                     "measured": statistics.median(frames) / base, "unit": "×",
                     "target": None, "met": None})
    return rows


def main(argv: list[str] | None = None) -> int:
    """Print the rows (and write them as JSON); exit 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--compare", metavar="ROOT", help="another llmtop checkout, alternated")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    roots = {"": THIS_ROOT}
    if args.compare:
        roots = {f" ({Path(args.compare).name})": str(Path(args.compare).resolve()),
                 " (this checkout)": THIS_ROOT}
    engine, url = scripted_engine()
    loads = [os.getloadavg()[0]]
    try:
        with tempfile.TemporaryDirectory(prefix="llmtop-tui-start-") as folder:
            results, floor = rounds(roots, url, folder, args.runs)
    finally:
        engine.terminate()
        engine.wait(10)
    loads.append(os.getloadavg()[0])
    rows = [row for label, (f, t, w) in results.items() for row in rows_for(label, f, t, w)]
    rows += floor_rows(results, floor)
    for r in rows:
        target = "" if r["target"] is None else f"  (target ≤ {r['target']:g} ms)"
        figure = f"{r['measured']:8.2f} ×" if r["unit"] == "×" else f"{r['measured']:8.1f} ms"
        print(f"{r['metric']:<90} {figure}{target}")
    print(f"load average {loads[0]:.2f} at the start, {loads[1]:.2f} at the end; "
          f"{os.cpu_count()} logical CPUs")
    if args.json:
        Path(args.json).write_text(json.dumps(rows), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
