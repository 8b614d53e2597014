"""`llmtop bench` end to end on the real embedded engine (docs/method.md, "The bench run")."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llmtop.exitcodes import ExitCode
from llmtop.sessions.records.log import read_log

pytestmark = pytest.mark.integration


def llmtop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llmtop", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def test_small_bench_on_the_real_model(engine_url, tmp_path):
    log = tmp_path / "bench.jsonl"
    p = llmtop(
        "bench",
        "--engine",
        "embedded",
        "--host",
        engine_url,
        "--requests",
        "8",
        "--warmup",
        "1",
        "--prompt-tokens",
        "64",
        "--max-tokens",
        "16",
        "--num-ctx",
        "2048",
        "--log",
        str(log),
        "--no-cache",
    )
    # 0 clean or 1 contaminated (a shared CI machine may drift); anything else is a failure
    assert p.returncode in (ExitCode.OK, ExitCode.NOISY), p.stderr
    md = p.stdout
    loaded = read_log(log)
    cal = loaded.calibration
    assert cal is not None
    point = cal.targets["64"]
    assert abs(point.tokens - 64) <= 0.05 * 64 and (cal.template_tokens or 0) > 0
    requests = loaded.requests
    # a first short request pays any model load, then 1 warm-up and 8 measured requests
    assert [r.phase for r in requests] == ["load", "warmup"] + ["measure"] * 8
    bench = requests[1:]
    assert len({r.prompt for r in bench}) == 9  # every prompt differs
    assert all(
        r.options == {"temperature": 0.0, "seed": 42, "num_predict": 16, "num_ctx": 2048}
        for r in bench
    )
    assert loaded.probes, "probe samples are logged during the run"
    # progress counts within each phase, as asked: warm-up 1/1, then request 1/8 … 8/8
    done = [line.split("]", 1)[1].split(":", 1)[0].strip() for line in p.stderr.splitlines()
            if line.startswith("[64 tok]")]
    assert done == ["warm-up 1/1"] + [f"request {k}/8" for k in range(1, 9)], p.stderr
    # the result row: every cell filled
    row = next(line for line in md.splitlines() if line.startswith("| 64 tok"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == 10 and all(cells), row
    assert cells[1] == "8" or int(cells[1]) >= 6  # n after warm-up (a cache hit would be listed)
    assert "n/a (n < 20)" in cells[2]  # p95 is not the max relabelled
    assert "## Environment" in md and "## Calibration" in md and "Q4_K_M" in md
    # the report command reproduces it from the log alone
    again = llmtop("report", str(log), "--format", "json")
    assert again.returncode == 0
    data = json.loads(again.stdout)
    assert data["sizes"][0]["prompt_tokens_target"] == 64 and data["sizes"][0]["n_ok"] == int(
        cells[1]
    )
    csv_out = llmtop("report", str(log), "--format", "csv").stdout.splitlines()
    assert len(csv_out) == 1 + 9  # header + warm-up + 8 measured


def test_report_of_a_bad_file_is_a_usage_error(tmp_path):
    bad = tmp_path / "x.jsonl"
    bad.write_text("not json\n")
    p = llmtop("report", str(bad))
    assert p.returncode == ExitCode.USAGE and "does not start with an llmtop header" in p.stderr


def test_sweep_cache_pair_and_conversation_on_the_real_model(engine_url, tmp_path):
    """Issue 24 end to end, kept short: 3 sizes, 1 cache pair, 3 turns."""
    log = tmp_path / "context.jsonl"
    p = llmtop(
        "bench", "--engine", "embedded", "--host", engine_url, "--requests", "2",
        "--warmup", "0", "--prompt-tokens", "32,64,96", "--max-tokens", "4",
        "--num-ctx", "1024", "--cache-pairs", "1", "--turns", "3", "--no-cache",
        "--no-save-curve", "--preflight-duration", "0", "--log", str(log), "--format", "json",
    )
    assert p.returncode in (ExitCode.OK, ExitCode.NOISY), p.stderr
    data = json.loads(p.stdout)
    curve = data["prefill_curve"]
    assert [round(s["tokens"]) for s in curve["sizes"]] == pytest.approx([32, 64, 96], abs=5)
    assert curve["prefill"] is not None and curve["formula"].startswith("prefill(ms) = ")
    (pair,) = data["cache_pairs"]
    # the embedded engine counts the whole prompt, cache or not: the hit shows in time only,
    # and the shared prefix (~96 tokens) leaves the warm request ~20 new tokens to read
    assert pair["source"] == "inferred" and pair["cached_tokens"] == 96
    assert pair["warm"]["prompt_eval_ms"] < pair["cold"]["prompt_eval_ms"]
    turns = data["conversation"]
    assert [t["turn"] for t in turns] == [1, 2, 3]
    counts = [t["context_tokens"] for t in turns]
    # each turn adds its ~32-token message and the previous answer (4 tokens) to the history
    assert counts[0] < counts[1] < counts[2] and not any(t["full"] for t in turns)
