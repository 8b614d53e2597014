"""The TUI's start in instructions, exec → first frame: a figure the machine's minute does not move.

    python bench/tui_start_instructions.py [--runs 2] [--compare ROOT]

`bench/tui_start.py` times the first frame on the wall clock; on a shared VM its runs spread
by ±150 ms from minute to minute, as wide as a change worth making. This counts the
instructions instead (valgrind's callgrind, its "Collected" total), which repeat to within
~0.1 % for the same tree once its bytecode is cached, so two trees are told apart by one run
each. The child is the real `llmtop --host URL --model timed` in a pseudo-terminal (120×40),
as in tui_start.py, against the same scripted engine; a small launcher (`LAUNCHER`, run by the
child's interpreter) ends the process at the write that puts the prompt box's placeholder on
the terminal, so the count is exec → first frame and nothing after it. The launcher changes
nothing in llmtop: it wraps Textual's terminal driver's `write` as the module is loaded.

Under valgrind the process runs ~50 times slower, so timers that fire during the start add
a little; the first run of a tree compiles its bytecode and is not counted. Needs `valgrind`
on PATH; without it the script says so and exits 2.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from tui_start import PROMPT_TEXT, THIS_ROOT, Screen, scripted_engine

# Run by the child's interpreter: wrap LinuxDriver.write when Textual loads it, end the
# process (no exit handlers: nothing after the frame is counted) once the prompt is written.
LAUNCHER = f"""
import importlib.abc, importlib.machinery, os, sys
class _EndAtFirstFrame(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "textual.drivers.linux_driver":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        load = spec.loader.exec_module
        def exec_module(module):
            load(module)
            write = module.LinuxDriver.write
            def counted(driver, data):
                done = write(driver, data)
                if {PROMPT_TEXT!r} in data:
                    driver.flush()
                    os._exit(0)
                return done
            module.LinuxDriver.write = counted
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, _EndAtFirstFrame())
from llmtop.cli import main
sys.argv[0] = "llmtop"
sys.exit(main())
"""
COLLECTED = re.compile(r"Collected : (\d+)")


def one_count(root: str, url: str, folder: str) -> int:
    """Instructions from exec to the first frame of the llmtop at `root`; raises
    RuntimeError with valgrind's last words when it reports no total."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLORTERM="truecolor", PYTHONPATH=root,
               NO_PROXY="127.0.0.1", PYTHONHASHSEED="0",
               PYTHONPYCACHEPREFIX=os.path.join(folder, "pycache"))
    env.pop("OLLAMA_HOST", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={folder}/callgrind.out",
            sys.executable, "-c", LAUNCHER, "--host", url, "--model", "timed",
            "--log", os.path.join(folder, "tui.jsonl")]
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=subprocess.PIPE, env=env,
                            cwd=root, start_new_session=True)
    os.close(slave)
    Screen(master)  # drains the terminal, so the child never blocks on a full pty
    err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
    proc.wait()
    os.close(master)
    found = COLLECTED.search(err)
    if found is None:
        raise RuntimeError(f"valgrind gave no count: {err[-600:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    """Print each tree's count (millions of instructions, median of `--runs`); exit 2
    without valgrind."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--compare", metavar="ROOT", help="another llmtop checkout, alternated")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("tui_start_instructions: valgrind is not on PATH (Debian: apt install valgrind)",
              file=sys.stderr)
        return 2
    roots = {"this checkout": THIS_ROOT}
    if args.compare:
        roots = {Path(args.compare).name: str(Path(args.compare).resolve()), **roots}
    counts: dict[str, list[int]] = {label: [] for label in roots}
    engine, url = scripted_engine()
    try:
        with tempfile.TemporaryDirectory(prefix="llmtop-tui-instr-") as folder:
            for root in roots.values():
                one_count(root, url, folder)  # compiles the tree's bytecode: not counted
            for i in range(args.runs):
                for label in (list(roots) if i % 2 == 0 else list(reversed(roots))):
                    counts[label].append(one_count(roots[label], url, folder))
                    print(f"run {i + 1} ({label}): {counts[label][-1] / 1e6:,.1f} M",
                          flush=True)
    finally:
        engine.terminate()
        engine.wait(10)
    for label, values in counts.items():
        print(f"TUI ({label}): instructions exec → first frame, median of {len(values)}: "
              f"{statistics.median(values) / 1e6:,.1f} M")
    return 0


if __name__ == "__main__":
    sys.exit(main())
