"""`llmtop compare` reads a bench log as the bench report does: the medians and n of its
baseline (the ok requests outside every slow episode), not of every ok request; it names a
model by what the file is, not by the engine's name for it; and it says when the engines'
configurations differ, naming the settings."""

from __future__ import annotations

import json
import statistics

import pytest

from llmtop import cli
from llmtop.sessions.analysis.compare.logs import compare_logs
from llmtop.sessions.analysis.run import analyze_run
from llmtop.sessions.records.log import read_log
from llmtop.sessions.reports.compare import headline
from llmtop.testing.paced import PacedEngine, episodes
from tests.unit.compare_logs import OPTIONS, write_log
from tests.unit.test_bench_episodes import REQUESTS, bench

BASE_1_10 = [400, 404, 396, 402, 398, 406, 394, 401, 399, 403]
EPISODE_11_18 = [800, 808, 792, 804, 796, 806, 794, 802]  # TTFT doubled for 8 requests
BASE_19_25 = [397, 405, 395, 400, 403, 398, 402]
TTFTS = [float(v) for v in BASE_1_10 + EPISODE_11_18 + BASE_19_25]


def test_compare_medians_and_n_are_the_bench_reports(tmp_path, capsys):
    path = write_log(tmp_path / "ep.jsonl", TTFTS)
    log = read_log(path)
    (size,) = analyze_run(log).sizes
    assert [(e.first, e.last) for e in size.episodes.episodes] == [(11, 18)]
    # By hand: the 17 baseline TTFTs sorted are 394 395 396 397 398 398 399 400 400 401 402
    # 402 403 403 404 405 406, median the 9th, 400; all 25 ok requests' median is the 13th
    # of all sorted, 403 (the 8 episode values all sort last): what compare said before.
    assert statistics.median(BASE_1_10 + BASE_19_25) == 400
    assert statistics.median(TTFTS) == 403
    report = size.summaries["ttft_ms"]
    assert (report.n, report.median) == (17, 400.0)
    c = compare_logs(log, log, metrics=("ttft",))
    (row,) = c.rows
    assert (row.n_a, row.n_b) == (17, 17)
    assert row.test is not None and row.test.median_a == row.test.median_b == 400.0
    # the two commands' JSON say the same
    cli.main(["report", str(path), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    summary = doc["sizes"][0]["summaries"]["ttft_ms"]
    cli.main(["compare", str(path), str(path), "--format", "json", "--metric", "ttft"])
    (compared,) = json.loads(capsys.readouterr().out)["comparisons"][0]["rows"]
    assert (compared["n_a"], compared["median_a"]) == (summary["n"], summary["median"])


def test_a_re_measured_bench_is_compared_by_its_25_not_its_34(tmp_path, monkeypatch):
    # the real bench on a scripted engine: requests 6–10 and 18–21 slowed 30 %, found and
    # set aside, 9 more measured: 34 measured, 25 in the baseline
    engine = PacedEngine(factor=episodes((6, 10), (18, 21), slower=1.3))
    log, _quiet = bench(tmp_path, monkeypatch, engine)
    (size,) = analyze_run(log).sizes
    assert len(size.ok) == REQUESTS + 9 and len(size.baseline) == REQUESTS
    c = compare_logs(log, log, metrics=("ttft", "decode"))
    for row in c.rows:
        report = size.summaries[row.metric.key]
        assert row.n_a == report.n == REQUESTS
        assert row.test is not None and row.test.median_a == pytest.approx(report.median)


# The same GGUF (Gemma 3 270M, Q4_K_M) as the embedded engine and llama-server report it
EMBEDDED = {"engine": "embedded", "model": "gemma3:270m",
            "model_details": {"name": "gemma3:270m", "family": "gemma3",
                              "parameter_size": "268.10M", "quantization": "Q4_K_M",
                              "format": "gguf", "size": 253_115_040, "size_vram": 0},
            "engine_config": {"config": "repack-on", "use_extra_bufts": True, "reason": "",
                              "source": "tested", "threads": 1}}
LLAMA_SERVER = {"engine": "openai", "model": "gemma-3-270m-it-Q4_K_M.gguf",
                "model_details": {"name": "gemma-3-270m-it-Q4_K_M.gguf",
                                  "parameter_size": "268.10M", "format": "gguf",
                                  "size": 241_410_624},
                "engine_config": {"server": "llama-server", "build_info": "b7000-abc",
                                  "model_path": "/models/gemma-3-270m-it-Q4_K_M.gguf",
                                  "total_slots": 1, "n_ctx_per_slot": 4096,
                                  "flags": {"threads": "2",
                                            "source": "command line of pid 900"}}}


def _pair(tmp_path, a_header, b_header):
    folder = tmp_path / f"pair{len(list(tmp_path.iterdir()))}"  # a new pair of logs each call
    folder.mkdir()
    a = write_log(folder / "a.jsonl", [float(v) for v in BASE_1_10], **a_header)
    b = write_log(folder / "b.jsonl", [float(v) for v in BASE_1_10], **b_header)
    return read_log(a), read_log(b)


def test_the_same_gguf_on_two_engines_is_one_model(tmp_path):
    a, b = _pair(tmp_path, EMBEDDED, LLAMA_SERVER)
    w = compare_logs(a, b, vary=("engine",)).checks.warnings
    assert not any(x.startswith("models differ") for x in w)
    # the sizes are not compared across engines (file bytes against tensor bytes); the
    # parameter counts agree; llama-server records no quantization, no log a digest
    assert ("the engines name the model differently (A gemma3:270m, B "
            "gemma-3-270m-it-Q4_K_M.gguf); the same model by its parameters 268.10M; not in "
            "both logs: digest, quantization") in w


def test_another_model_is_said_to_differ_with_the_field(tmp_path):
    other = {**LLAMA_SERVER, "model": "llama-3.2-1b.gguf",
             "model_details": {**LLAMA_SERVER["model_details"], "parameter_size": "1235.81M"}}
    a, b = _pair(tmp_path, EMBEDDED, other)
    w = compare_logs(a, b, vary=("engine",)).checks.warnings
    assert ("models differ: A gemma3:270m, B llama-3.2-1b.gguf (parameters A 268.10M, B "
            "1235.81M)") in w
    # one count in two spellings is one count: 8.0B is 7.95–8.05 billion
    eight = {**EMBEDDED, "model_details": {**EMBEDDED["model_details"], "parameter_size": "8.0B",
                                           "quantization": None}}
    eight_m = {**EMBEDDED, "model": "llama-8b",
               "model_details": {**EMBEDDED["model_details"], "parameter_size": "8030.26M",
                                 "quantization": None}}
    a, b = _pair(tmp_path, eight, eight_m)
    w = compare_logs(a, b).checks.warnings
    assert not any(x.startswith("models differ") for x in w)


def test_threads_that_differ_are_named_in_the_warning_and_the_headline(tmp_path):
    # the embedded engine's default 1 thread against llama-server's --threads 2
    a, b = _pair(tmp_path, EMBEDDED, LLAMA_SERVER)
    c = compare_logs(a, b, vary=("engine",))
    assert c.checks.config == ["threads A 1, B 2"]  # repack: on (default) on both
    assert ("engine configurations differ (threads A 1, B 2): a difference below may be the "
            "configuration's rather than the engine's or the change's (--vary config if that "
            "is the point)") in c.checks.warnings
    assert headline(c).endswith("; the engines' configurations differ (threads A 1, B 2), so "
                                "a difference may be the configuration's")
    # at equal threads nothing is said; --vary config says it is the point
    two = {**EMBEDDED, "engine_config": {**EMBEDDED["engine_config"], "threads": 2}}
    a, b = _pair(tmp_path, two, LLAMA_SERVER)
    assert compare_logs(a, b, vary=("engine",)).checks.config == []
    a, b = _pair(tmp_path, EMBEDDED, LLAMA_SERVER)
    assert compare_logs(a, b, vary=("engine", "config")).checks.config == []


def test_the_requests_num_thread_counts_where_the_engine_takes_it(tmp_path):
    # Ollama's API takes num_thread per request: 1 against the engine default 2 is 1 against 2
    one = {**EMBEDDED, "options": {**OPTIONS, "num_thread": 1},
           "engine_config": {**EMBEDDED["engine_config"], "threads": 2}}
    two = {**EMBEDDED, "engine_config": {**EMBEDDED["engine_config"], "threads": 2}}
    a, b = _pair(tmp_path, one, two)
    assert compare_logs(a, b).checks.config == ["threads A 1, B 2"]
    # the OpenAI API has no thread-count field: llama-server ran with its --threads 2
    sent = {**LLAMA_SERVER, "options": {**OPTIONS, "num_thread": 1}}
    a, b = _pair(tmp_path, sent, LLAMA_SERVER)
    assert compare_logs(a, b).checks.config == []
    # a llama-server whose command line was not read: its threads are unknown, not compared
    unread = {**LLAMA_SERVER, "engine_config": {**LLAMA_SERVER["engine_config"],
                                                "flags": {"source": "not read: remote"}}}
    a, b = _pair(tmp_path, EMBEDDED, unread)
    assert compare_logs(a, b, vary=("engine",)).checks.config == []
