"""A CPU burner switched on halfway through a bench: the slow requests are a slow episode,
the run (not re-measured) is CONTAMINATED as its baseline is short, and the burner is named
as the episode's culprit with its cost (docs/method.md, "Quiet machine", "Slow episodes").
Real engine and burner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from llmtop.exitcodes import ExitCode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

NAME = "llmtop-burner"  # its own process name (a symlink to python), so it is its own app
SWITCH_AT = 7  # measured requests done before the burner starts


def measured_requests(log: Path) -> int:
    try:
        lines = log.read_text().splitlines()
    except OSError:
        return 0
    count = 0
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        count += rec.get("type") == "request" and rec.get("phase") == "measure"
    return count


def test_burner_halfway_is_named(engine_url, tmp_path):
    link = tmp_path / NAME
    link.symlink_to(os.path.realpath(sys.executable))
    log = tmp_path / "bench.jsonl"
    burners: list[subprocess.Popen[bytes]] = []
    done = threading.Event()

    def switch_on() -> None:
        while not done.is_set():
            if measured_requests(log) >= SWITCH_AT:
                # one burning core: llama.cpp's threads wait for each other, so the engine slows
                burners.append(subprocess.Popen([str(link), "-c", "while True: pass"]))
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=switch_on, daemon=True)
    watcher.start()
    try:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "llmtop",
                "bench",
                "--engine",
                "embedded",
                "--host",
                engine_url,
                "--requests",
                "14",
                "--warmup",
                "1",
                "--prompt-tokens",
                "32",
                "--max-tokens",
                "32",
                "--num-ctx",
                "2048",
                "--preflight-duration",
                "0",
                "--no-cache",
                "--no-remeasure",  # the burner runs to the end: re-measuring would meet it
                # a thread per CPU, so one burning core stalls the engine (its default on a
                # small machine leaves a CPU free: llama_backend.default_threads)
                "--num-thread",
                str(os.cpu_count() or 1),
                "--log",
                str(log),
                "--json",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=280,
        )
    finally:
        done.set()
        for b in burners:
            b.kill()
            b.wait(10)
    assert burners, "the burner never started"
    assert p.returncode == ExitCode.NOISY, p.stderr[-2000:]
    report = json.loads(p.stdout)
    assert report["verdict"] == "contaminated"
    episodes = report["episodes"]["32"]
    # the burner started after request 7 and ran to the end: the last episode reaches 14
    assert episodes and episodes[-1]["last"] == 14, episodes
    covered = len(episodes) == 1 and episodes[0]["first"] == 1 and not episodes[0]["changes_pct"]
    if covered:  # a free request slowed by this shared machine too (1 run in 4 alone, here):
        # the series' levels disagree, no request is left outside the episodes, and the
        # whole run's first 5 against its last 5 name the cause (reports/run.py, whole_run)
        assert episodes[0]["sentence"].endswith("the run has no baseline level"), episodes
    else:
        assert episodes[0]["first"] > SWITCH_AT - 2, episodes
        costly = max(episodes, key=lambda e: e["slower_pct"] or 0.0)
        assert costly["slower_pct"] > 5 and costly["sentence"].startswith(f"{NAME} was busy")
    att = report["attribution"]["32"]
    assert att["culprit"] == NAME, att
    assert att["evidence"].startswith(f"{NAME}: ")
