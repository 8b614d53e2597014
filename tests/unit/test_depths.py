"""Context-depth sweeps (`bench --depths`): the depths parsed, the engine's context that must
hold them, the median's interval per depth, and a sweep against the scripted engine of
testing/context.py, whose prefill for T tokens is exactly 20 + 0.8·T + 4e-4·T² ms, so each
depth's prefill rate is computed from the server's own count of what it served."""

from __future__ import annotations

import argparse
import asyncio

import pytest

from llmtop.cli import build_parser
from llmtop.connect import connect
from llmtop.sessions.analysis.compare.logs import compare_logs
from llmtop.sessions.analysis.depth import DEPTH_METRICS, estimate
from llmtop.sessions.measure.config import BenchConfig
from llmtop.sessions.measure.depths import (
    ContextLimit,
    context_limit,
    depth_label,
    depth_refusal,
    parse_depths,
)
from llmtop.sessions.measure.metrics import SERVER_PREFILL, Carrier, carried_by
from llmtop.sessions.measure.stats import median_interval
from llmtop.sessions.records.log import read_log
from llmtop.sessions.reports.formats import render
from llmtop.sessions.reports.run import build
from llmtop.sessions.runners.bench import BenchRunner
from llmtop.testing.context import ContextUpstream, Prefill


@pytest.mark.parametrize(("text", "depths"), [
    ("1k,4k,16k", (1024, 4096, 16384)),  # k = 1024: contexts are powers of two
    ("256,1000", (256, 1000)),  # plain tokens, as llama-bench's -d
    ("1.5k, 8K", (1536, 8192)),
])
def test_depths_parse_as_tokens_k_being_1024(text, depths):
    assert parse_depths(text) == depths


@pytest.mark.parametrize(("text", "said"), [
    ("1x", "not a token count"),
    ("", "not a token count"),
    ("-1k", "not a token count"),
    ("0.3k", "307.2 tokens, not a whole number"),
    ("4", "outside 8"),
    ("20000k", "outside 8"),
    ("4k,4096", "given twice"),
])
def test_bad_depths_are_refused_naming_the_part(text, said):
    with pytest.raises(argparse.ArgumentTypeError, match=said):
        parse_depths(text)


def test_depth_labels():
    assert [depth_label(d) for d in (1024, 8192, 1000, 256)] == ["1k", "8k", "1000", "256"]


def test_depths_and_prompt_sizes_are_one_or_the_other(capsys):
    parser = build_parser()
    args = parser.parse_args(["bench", "--depths", "1k,2k"])
    assert args.depths == (1024, 2048)
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["bench", "--depths", "1k", "--prompt-tokens", "200"])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_the_context_limit_is_the_engines_own():
    # llama-server: one slot's n_ctx from /props, whatever --num-ctx says (it is not sent)
    server = context_limit("openai", {"server": "llama-server", "n_ctx_per_slot": 4096},
                           8192, {}, 65536)
    assert server is not None and server.tokens == 4096 and "-c/--ctx-size" in server.remedy
    # vLLM: its /models max_model_len
    vllm = context_limit("openai", None, 32768, {}, 8192)
    assert vllm is not None and vllm.tokens == 32768
    # an OpenAI server that says nothing: no limit to check against
    assert context_limit("openai", None, None, {}, 8192) is None
    # Ollama and the embedded engine: --num-ctx, capped by the model's training context
    trained = {"gemma3.context_length": 32768}
    assert context_limit("ollama", None, None, trained, 8192) == ContextLimit(
        8192, "--num-ctx", "raise --num-ctx (up to the model's training context, 32,768)")
    capped = context_limit("embedded", None, None, trained, 65536)
    assert capped is not None and capped.tokens == 32768
    assert "gemma3.context_length" in capped.source


def test_a_depth_past_the_context_is_refused_naming_the_limit_and_the_flag():
    limit = context_limit("openai", {"n_ctx_per_slot": 8192}, None, {}, 8192)
    assert limit is not None
    # 8,092 + 100 output tokens = 8,192: fits exactly
    assert depth_refusal((1024, 8092), 100, limit) is None
    said = depth_refusal((1024, 8192), 100, limit)
    assert said is not None
    assert "depth 8k (8,192 tokens)" in said and "needs 8,292 tokens" in said
    assert "limit is 8,192" in said and "-c/--ctx-size" in said and "up to 8,092" in said
    ollama = context_limit("ollama", None, None, {}, 4096)
    assert ollama is not None
    assert "raise --num-ctx" in (depth_refusal((4096,), 1, ollama) or "")


def test_the_medians_interval_is_the_sign_tests():
    # n = 5: min and max cover 1 − 2/32 = 93.75 % < 95 %: no interval
    assert median_interval([5, 1, 4, 2, 3]) is None
    # n = 6: 1 − 2/64 = 96.9 %: (min, max)
    assert median_interval([6, 1, 5, 2, 4, 3]) == (1, 6)
    # n = 9: k = 2 covers 1 − 2·(1 + 9)/512 = 96.1 %; k = 3, 1 − 2·46/512 = 82 %
    assert median_interval(list(range(9, 0, -1))) == (2, 8)
    # None and non-finite values are skipped
    assert median_interval([None, float("nan"), 1, 2, 3, 4, 5, 6]) == (1, 6)
    few = estimate([3.0, 1.0])
    assert few.median == 2.0 and few.low is None and "needs 6 or more" in (few.note or "")


def test_the_depth_table_is_the_metric_tables():
    assert set(DEPTH_METRICS) == set(carried_by(Carrier.DEPTH))


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def sweep(up: ContextUpstream, path: str, depths: tuple[int, ...]) -> object:
    async def go() -> object:
        conn = await connect("ollama", up.url, "slotted")
        try:
            cfg = BenchConfig(requests=6, warmup=1, max_tokens=4, preflight_s=0,
                              save_curve=False, prompt_tokens=depths, depths=depths)
            return await BenchRunner(conn, cfg, path).run()
        finally:
            await conn.close()

    return asyncio.run(go())


def test_a_depth_sweep_reports_each_depths_prefill_from_the_servers_count(tmp_path):
    path = tmp_path / "depth.jsonl"
    with ContextUpstream(Prefill(20.0, 0.8, 4e-4)) as up:
        outcome = sweep(up, str(path), (64, 256))
    log = read_log(path)
    measured = [r for r in log.requests if r.phase == "measure"]
    # the record says the depth it was sent at, and reads back typed
    assert sorted({r.plan.depth for r in measured}) == [64, 256]
    assert log.header.bench is not None and log.header.bench.depths == (64, 256)
    report = build(outcome.log)
    assert [row.depth for row in report.depths] == [64, 256]
    for row in report.depths:
        t = row.tokens
        assert t is not None and abs(t - row.depth) <= 0.1 * row.depth
        # every request of a depth took 20 + 0.8·T + 4e-4·T² ms for its T tokens
        rate = t / (20 + 0.8 * t + 4e-4 * t * t) * 1000
        prefill = row.estimates[SERVER_PREFILL.key]
        assert prefill.n == 6
        assert prefill.median == pytest.approx(rate, rel=1e-3)
        assert prefill.low == pytest.approx(rate, rel=1e-3)
        assert prefill.high == pytest.approx(rate, rel=1e-3)
    md = render(report, "md")
    assert "## Context depth" in md
    data = render(report, "json")
    assert '"context_depth"' in data and '"ci_low"' in data


def test_compare_gives_a_verdict_per_depth(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    with ContextUpstream(Prefill(20.0, 0.8, 4e-4)) as up:
        sweep(up, str(a), (64, 256))
    with ContextUpstream(Prefill(20.0, 1.6, 8e-4)) as up:  # twice the per-token work
        sweep(up, str(b), (64, 256))
    result = compare_logs(read_log(a), read_log(b), metrics=("prefill",))
    assert not result.refused, result.checks.problems
    assert [r.group for r in result.rows] == ["depth 64", "depth 256"]
    assert all(r.regression for r in result.rows)
