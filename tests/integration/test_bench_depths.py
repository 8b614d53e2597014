"""`llmtop bench --depths` end to end on the real embedded engine (docs/guide/context.md,
"Context depth"): a small sweep with an interval per depth, and a depth past the context
refused before any request."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llmtop.exitcodes import ExitCode
from llmtop.sessions.records.log import read_log

pytestmark = pytest.mark.integration


def llmtop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llmtop", *args], capture_output=True,
                          text=True, check=False, timeout=600)


def test_a_depth_sweep_on_the_real_model(engine_url, tmp_path):
    log = tmp_path / "depths.jsonl"
    p = llmtop("bench", "--engine", "embedded", "--host", engine_url, "--depths", "256,1k",
               "--requests", "6", "--warmup", "0", "--max-tokens", "16", "--num-ctx", "2048",
               "--preflight-duration", "0", "--no-cache", "--no-save-curve", "--log", str(log),
               "--json")
    # 0 clean or 1 contaminated (a shared machine may drift); anything else is a failure
    assert p.returncode in (ExitCode.OK, ExitCode.NOISY), p.stderr
    loaded = read_log(log)
    assert loaded.header.bench is not None and loaded.header.bench.depths == (256, 1024)
    measured = [r for r in loaded.requests if r.phase == "measure"]
    assert {r.plan.depth for r in measured} == {256, 1024}
    rows = json.loads(p.stdout)["context_depth"]
    assert [row["depth"] for row in rows] == [256, 1024]
    for row in rows:
        # the server's count of the context lands within 5 % of the depth (calibrated)
        assert abs(row["server_tokens"] - row["depth"]) <= 0.05 * row["depth"]
        ok = [r for r in measured if r.plan.depth == row["depth"] and r.status == "ok"]
        for key in ("server_prefill_tps", "server_decode_tps", "tpot_ms", "ttft_ms"):
            cell = row[key]
            values = sorted(v for r in ok if (v := r.metric(key)) is not None)
            if cell["n"] < 6:  # an episode set requests aside: no interval, said why
                assert cell["ci_low"] is None and "6 or more" in cell["note"]
                continue
            # the sign test's interval of a median holds it, between the baseline's values
            assert cell["ci_low"] <= cell["median"] <= cell["ci_high"]
            assert values[0] <= cell["ci_low"] and cell["ci_high"] <= values[-1]
    # prefill of 1k tokens takes longer than of 256 (its TTFT median is larger)
    assert rows[1]["ttft_ms"]["median"] > rows[0]["ttft_ms"]["median"]
    md = llmtop("report", str(log))
    assert md.returncode == 0 and "## Context depth" in md.stdout


def test_a_depth_past_the_context_is_refused_before_any_request(engine_url, tmp_path):
    log = tmp_path / "refused.jsonl"
    p = llmtop("bench", "--engine", "embedded", "--host", engine_url, "--depths", "1k,4k",
               "--num-ctx", "4096", "--max-tokens", "32", "--preflight-duration", "0",
               "--log", str(log))
    assert p.returncode == ExitCode.USAGE, p.stderr
    # 4,096 + 32 > 4,096: the limit is --num-ctx, which may go up to Gemma 3's 32k
    assert "depth 4k (4,096 tokens) plus --max-tokens 32 needs 4,128 tokens" in p.stderr
    assert "limit is 4,096 (--num-ctx)" in p.stderr
    assert "raise --num-ctx (up to the model's training context, 32,768)" in p.stderr
    assert not log.exists() or not read_log(log).requests
