"""`llmtop load` on the real embedded engine, which serves one request at a time: its sweep
shows flat throughput, and each extra concurrent user adds about one service time to TTFT
(docs: README, "llmtop load"). The service time is measured at concurrency 1 (E2E there)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llmtop.exitcodes import ExitCode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

# The engine's own service times vary between requests (sampling, the machine); these bounds
# are what a shared 2-core runner held in the measured runs, not llmtop's precision.
FLAT = 0.4  # throughput may vary by ±40 % across levels (4 requests each, a shared runner)
PER_USER = 0.4  # TTFT added per extra user within ±40 % of one service time


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
    assert p.returncode == ExitCode.OK, p.stderr
    report = json.loads(p.stdout)
    assert report["environment"]["parallel"]["slots"] == 1
    one, two, three = report["levels"]
    assert all(lv["ok"] == 4 for lv in (one, two, three))
    rates = [lv["req_per_s"] for lv in (one, two, three)]
    assert max(rates) <= (1 + FLAT) * min(rates)
    service_ms = one["e2e"]["p50"]
    for extra, lv in ((1, two), (2, three)):
        added = lv["ttft"]["p50"] - one["ttft"]["p50"]
        assert added == pytest.approx(extra * service_ms, rel=PER_USER)
