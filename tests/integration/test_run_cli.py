"""`llmtop run` on the real embedded engine (README.md, "Exit codes")."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from llmtop.exitcodes import ExitCode
from llmtop.servers.child import free_port
from llmtop.sessions.records.log import read_log

pytestmark = pytest.mark.integration


def llmtop(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llmtop", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


def test_run_json_on_the_real_model_cold_then_warm(fresh_engine, tmp_path):
    host = fresh_engine.host
    runs = []
    for i in range(2):
        log = tmp_path / f"run{i}.jsonl"
        p = llmtop(
            "run",
            "--engine",
            "embedded",
            "--host",
            host,
            "--prompt",
            "Why is the sky blue?",
            "--num-predict",
            "24",
            "--json",
            "--log",
            str(log),
        )
        assert p.returncode == ExitCode.OK, p.stderr
        runs.append(json.loads(p.stdout))
    first, second = runs
    for r in runs:
        assert r["status"] == "ok" and r["error"] is None and r["engine"] == "embedded"
        assert r["output_tokens"] == r["eval_count"] == 24 and r["done_reason"] == "length"
        assert r["ttft_ms"] > 0 and r["tpot_ms"] > 0 and r["e2e_ms"] > r["ttft_ms"]
        assert r["model"] == "gemma3:270m" and r["quantization"] == "Q4_K_M"
        assert r["decode_tps"] > 0 and r["prefill_tps"] > 0 and r["prompt_eval_count"] > 5
    # the first request loaded the model; the second found it loaded
    assert first["load_ms"] > 100 and second["load_ms"] < first["load_ms"] / 10
    # cold-start, the report's word, when the load passed analysis.run.COLD_START_MS (1 s)
    assert first["cold_start"] == (first["load_ms"] > 1000) and second["cold_start"] is False
    loaded = read_log(runs[1]["log"])
    assert (
        loaded.header.model == "gemma3:270m" and loaded.header.environment["cpu_cores_logical"] >= 1
    )
    (req,) = loaded.requests
    assert req.stats is not None and req.stats.eval_count == 24 and len(req.chunks) >= 1
    assert loaded.probes, "probe samples are logged with the request"
    # the JSON says what the probes saw during the request, as its log does
    during = [pr for pr in loaded.probes if pr.request_id == req.id]
    # one sample at least: the one taken as the request ended (new-user pass N11: a request
    # shorter than the sampling period had none, and the JSON said "noisy": false)
    assert during
    assert second["probe_samples"] == {"noisy": sum(pr.noisy for pr in during),
                                       "total": len(during)}
    assert second["noisy"] == any(pr.noisy for pr in during)


def test_run_text_mode_starts_and_stops_its_own_engine(tmp_path):
    p = llmtop(
        "run",
        "--engine",
        "embedded",
        "--prompt",
        "Hello",
        "--num-predict",
        "8",
        "--log",
        str(tmp_path / "l.jsonl"),
    )
    assert p.returncode == ExitCode.OK, p.stderr
    assert "TTFT" in p.stdout and "status        ok" in p.stdout
    assert "embedded at http://127.0.0.1:" in p.stderr
    # The engine this run started is warmed up first (a load-only request), so the measured
    # request is warm: new-user pass D4 found every `run` a cold start that "run again"
    # could not cure. Finding P: its 0.6 s of "overhead" was the wait for the vocabulary,
    # load time now (and paid by the warm-up)
    assert "# warm-up: the engine this run started loaded the model in " in p.stderr
    figures = {line[:14].strip(): line[14:] for line in p.stdout.splitlines()}
    load_ms = float(figures["load"].split()[0])
    ttft_ms = float(figures["TTFT"].split()[0])
    overhead_ms = float(figures["overhead"].split()[0])
    assert figures["status"].strip() == "ok"  # not a cold start
    # a warm load is the engine's bookkeeping: well under analysis.run.COLD_START_FLOOR_MS
    # (50 ms); the overhead is part of the TTFT
    assert load_ms < 50 and 0 <= overhead_ms < ttft_ms, (load_ms, overhead_ms, ttft_ms)


def test_unreachable_ollama_is_exit_3_with_a_remedy():
    port = free_port()
    p = llmtop("run", "--engine", "ollama", "--host", f"127.0.0.1:{port}", "--prompt", "hi")
    assert p.returncode == ExitCode.ENGINE_UNREACHABLE
    assert f"127.0.0.1:{port}" in p.stderr and "ollama serve" in p.stderr


@pytest.mark.parametrize("command", ["run", "bench", "load"])
def test_unreachable_with_json_answers_on_stdout(command):
    # issue 32, finding L: `run --json` to an unreachable host printed nothing on stdout
    port = free_port()
    extra = ["--prompt", "hi"] if command == "run" else []
    p = llmtop(command, "--engine", "ollama", "--host", f"127.0.0.1:{port}", "--json", *extra)
    assert p.returncode == ExitCode.ENGINE_UNREACHABLE, p.stderr
    answer = json.loads(p.stdout)
    assert answer["status"] == "error" and answer["exit_code"] == ExitCode.ENGINE_UNREACHABLE
    assert answer["error"]["kind"] == "unreachable"
    assert f"127.0.0.1:{port}" in answer["error"]["message"]
    assert "ollama serve" in answer["error"]["remedy"]


def test_unknown_model_is_exit_4_and_lists_installed(engine_url):
    p = llmtop(
        "run",
        "--engine",
        "embedded",
        "--host",
        engine_url,
        "--model",
        "llama3:8b",
        "--prompt",
        "hi",
    )
    assert p.returncode == ExitCode.MODEL_NOT_FOUND
    assert "llama3:8b" in p.stderr and "installed: gemma3:270m" in p.stderr


def test_empty_prompt_is_a_usage_error():
    p = llmtop("run", "--prompt", "  ")
    assert p.returncode == ExitCode.USAGE and "--prompt is empty" in p.stderr


@pytest.mark.parametrize("command", [["run", "--prompt", "hi"], ["bench"], ["preflight"]])
def test_a_bad_config_file_is_refused_before_anything_runs(tmp_path, command):
    config = tmp_path / "bad.toml"
    config.write_text("[thresholds]\napp_cpu_warn = \"ten\"\n")
    env = {**os.environ, "LLMTOP_CONFIG": str(config)}
    p = subprocess.run(
        [sys.executable, "-m", "llmtop", *command],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=60,
    )
    assert p.returncode == ExitCode.USAGE, p.stderr
    assert str(config) in p.stderr and "app_cpu_warn" in p.stderr


def test_the_app_without_a_terminal_points_to_the_headless_commands():
    p = subprocess.run(
        [sys.executable, "-m", "llmtop"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert p.returncode == ExitCode.USAGE and "llmtop run --prompt" in p.stderr
