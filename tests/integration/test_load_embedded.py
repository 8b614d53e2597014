"""`llmtop load` on the real embedded engine, which serves one request at a time: its sweep
shows flat throughput, and each extra concurrent user adds about one service time to TTFT
(docs/guide/load.md). The service time is measured at concurrency 1 (E2E there)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest

from llmtop.exitcodes import ExitCode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

# The engine's own service times vary between requests (sampling, the machine); these bounds
# are what a shared 2-core runner held in the measured runs, not llmtop's precision.
BUSY = 0.15  # a level's throughput within ±15 % of what the engine's own busy time allows
# (measured 0.92–0.98 of it in 15 levels: the rest is tokenizing and the gaps between requests)
PER_USER = 0.4  # TTFT added per extra user within ±40 % of one service time
# Why not "flat across levels" directly: on this VM the engine sometimes stalls by itself
# (a 12-token decode took 2823 ms by its own eval_duration, against ~200 ms; seen on the
# tree before and after the 2026-11-30 changes, 2 runs in 8), which makes one level slow for
# reasons outside llmtop. One slot serves one request at a time, so each level's throughput
# is n / (sum of the engine's own busy time: load + prompt_eval + eval durations; not
# total_duration, which includes the wait in its queue) — flat as long as the engine's
# service time is — and that is what llmtop's figure must match, stall or not.


def _measured(log_path) -> list[tuple[int, float]]:
    """(level, the engine's own busy time in ms: load + prompt_eval + eval) per request."""
    out = []
    for line in log_path.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("type") == "request" and rec.get("level") is not None:
            stats = rec["stats"]
            ns = stats.get("load_duration", 0) + stats["prompt_eval_duration"]
            out.append((rec["level"], (ns + stats["eval_duration"]) / 1e6))
    return out


def busy_seconds(log_path) -> dict[int, float]:
    """Per level: the engine's own busy time (s), summed over the level's requests."""
    busy: dict[int, float] = {}
    for level, ms in _measured(log_path):
        busy[level] = busy.get(level, 0.0) + ms / 1e3
    return busy


def test_one_slot_flat_throughput_and_ttft_grows_a_service_time_per_user(engine_url, tmp_path):
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmtop",
            "load",
            "--engine",
            "embedded",
            "--host",
            engine_url,
            "--concurrency",
            "1,2,3",
            "--requests",
            "4",
            "--prompt-tokens",
            "50",
            "--max-tokens",
            "12",
            "--num-ctx",
            "2048",
            "--log",
            str(tmp_path / "load.jsonl"),
            "--json",
            "--no-cache",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=800,
    )
    report = json.loads(p.stdout)
    # the exit code is the sweep's verdict (a level NOISY on this shared machine: 1)
    noisy = report["verdict"]["word"] == "contaminated"
    assert p.returncode == (ExitCode.NOISY if noisy else ExitCode.OK), p.stderr
    assert report["knee"]["trusted"] is not noisy
    assert report["environment"]["parallel"]["slots"] == 1
    one, two, three = report["levels"]
    assert all(lv["ok"] == 4 for lv in (one, two, three))
    busy = busy_seconds(tmp_path / "load.jsonl")
    for level, lv in enumerate((one, two, three)):
        # e.g. 4 requests of ~310 ms each by the engine's clock: 4 / 1.24 s = 3.2 req/s
        assert lv["req_per_s"] == pytest.approx(4 / busy[level], rel=BUSY)
    # one service time: the median of the engine's own busy time over the level's own 4
    # requests (the wait is behind requests of that level). On a loaded machine the service
    # time moves between levels: one run added 5.5 s of TTFT at 3 users against a run-wide
    # median service time of 1.5 s, outside ±40 % of 2 × 1.5 s.
    by_level: dict[int, list[float]] = {}
    for level, ms in _measured(tmp_path / "load.jsonl"):
        by_level.setdefault(level, []).append(ms)
    for extra, (level, lv) in ((1, (1, two)), (2, (2, three))):
        added = lv["ttft"]["p50"] - one["ttft"]["p50"]
        assert added == pytest.approx(extra * statistics.median(by_level[level]), rel=PER_USER)
