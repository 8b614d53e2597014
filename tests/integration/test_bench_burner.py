"""A CPU burner switched on halfway through a bench: the run is flagged as drifted and the
burner is named as the likely culprit (docs/method.md, "Quiet machine"). Real engine and burner."""

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
    drift = report["sizes"][0]["drift"]["server_decode_tps"]
    assert drift["worse"] and drift["change_pct"] < -5
    att = report["attribution"]["32"]
    assert att["culprit"] == NAME, att
    assert att["evidence"].startswith(f"{NAME}: ")
