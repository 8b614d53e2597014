"""Prefix-cache pairs and conversations (bench --cache-pairs / --turns) against the scripted
engine of testing/context.py, whose prefill for T tokens with n cached is exactly
a + b·(T − n) + c·(T² − n²) ms, so what llmtop must find is computed from the server's own
record of what it served (`state.seen`: T, n, prefill ms).
"""

from __future__ import annotations

import asyncio

import pytest

from llmtop.connect import connect
from llmtop.sessions.measure.config import BenchConfig
from llmtop.sessions.reports.formats import render
from llmtop.sessions.reports.run import build
from llmtop.sessions.runners.bench import BenchRunner
from llmtop.testing.context import ContextUpstream, Prefill

TRUE = Prefill(20.0, 0.8, 4e-4)


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def bench(up: ContextUpstream, path: str, **config: object) -> object:
    async def go() -> object:
        conn = await connect("ollama", up.url, "slotted")
        try:
            cfg = BenchConfig(
                requests=1, warmup=0, max_tokens=4, preflight_s=0, save_curve=False, **config
            )  # type: ignore[arg-type]
            return await BenchRunner(conn, cfg, path).run()
        finally:
            await conn.close()

    return asyncio.run(go())


def test_cache_pairs_saving_per_cached_token_is_exact(tmp_path):
    with ContextUpstream(TRUE, cache="count") as up:
        outcome = bench(up, str(tmp_path / "b.jsonl"), prompt_tokens=(64, 128), cache_pairs=2)
        seen = list(up.state.seen)
    report = build(outcome.log)
    assert len(report.pairs) == 2
    for pair, ((t_cold, n_cold, ms_cold), (t_warm, n_warm, ms_warm)) in zip(
        report.pairs, [seen[-4:-2], seen[-2:]], strict=True
    ):
        # same word counts: the two prompts are the same size; the cold one shares only the
        # template with what came before, the warm one the whole prefix
        assert t_cold == t_warm and n_warm > n_cold
        assert pair.source == "prompt_eval_count"
        assert pair.cached_tokens == n_warm - n_cold
        # (f(T, n_c) − f(T, n_w)) / (n_w − n_c) = b + c·(n_c + n_w)
        expected = 0.8 + 4e-4 * (n_cold + n_warm)
        assert (ms_cold - ms_warm) / (n_warm - n_cold) == pytest.approx(expected)
        assert pair.saving_ms_per_token == pytest.approx(expected, abs=1e-6)
    md = render(report, "md")
    assert "## Prefix cache" in md and "the warm prompt_eval_count was smaller" in md
    assert "inferred" not in md
    assert 'id="cache-pairs"' in render(report, "html")


def test_a_server_that_reports_no_cached_count_gets_an_inferred_label(tmp_path):
    with ContextUpstream(TRUE, cache="none") as up:  # full counts: the hit shows in time only
        outcome = bench(up, str(tmp_path / "b.jsonl"), prompt_tokens=(64, 128), cache_pairs=1)
        (_t, _nc, ms_cold), (_t2, _nw, ms_warm) = up.state.seen[-2:]
    (pair,) = build(outcome.log).pairs
    assert pair.source == "inferred"
    assert pair.cached_tokens == 128  # the shared prefix's calibrated size, as labelled
    assert pair.saving_ms_per_token == pytest.approx((ms_cold - ms_warm) / 128, abs=1e-6)
    md = render(build(outcome.log), "md")
    assert "128 (inferred)" in md and "inferred from time" in md


def test_conversation_grows_and_marks_where_the_context_fills(tmp_path):
    # num_ctx 150 on both sides. A turn's message: 15 words + the 7-word instruction = 22
    # tokens (calibrated for 32 with the 10 template tokens); each answer 4 words. So turn k
    # holds 32 + 26·(k − 1) tokens: 32, 58, 84, 110, 136, then 162 > 149, which the server
    # cuts to its last 149 tokens; 149 + 4 output ≥ 150 marks turn 6 full.
    with ContextUpstream(TRUE, num_ctx=150) as up:
        outcome = bench(
            up, str(tmp_path / "b.jsonl"), prompt_tokens=(32, 64, 96, 128), num_ctx=150, turns=7
        )
    report = build(outcome.log)
    turns = report.turns
    assert [t.turn for t in turns] == list(range(1, 8))
    assert [t.context_tokens for t in turns] == [32, 58, 84, 110, 136, 149, 149]
    assert [bool(t.full) for t in turns] == [False] * 5 + [True, True]
    assert "reach num_ctx 150" in turns[5].full
    # no cache: every turn's prefill is the cold one the sweep's curve predicts
    for t in turns[:5]:
        assert t.predicted_ms == pytest.approx(TRUE.ms(t.context_tokens or 0), rel=1e-6)
        assert t.record.metrics.prompt_eval_ms == pytest.approx(t.predicted_ms, rel=1e-6)
    md = render(report, "md")
    assert "## Conversation" in md and "The context filled at turn 6" in md
    assert 'id="turns"' in render(report, "html")
    rows = render(report, "csv").splitlines()  # every request: the sizes', then the turns
    assert sum(1 for line in rows if ",turn,ok," in line) == 7


def test_the_conversation_replayed_with_the_cache_defeated(tmp_path):
    # cache "none": the server caches its last prompt + answer but counts every token. Turn k
    # holds T_k = 32 + 26·(k − 1) tokens (see the test above). Warm: turn k ≥ 2 finds turn
    # k − 1's prompt and its 4-word answer in the cache, n = T_(k−1) + 4; turn 1 only the
    # template tokens. The replay sends the same history and message after a 4-word system
    # message: T_k + 4 tokens, of which only the template tokens match the cache.
    import json

    from llmtop.sessions.analysis.context import cache_saving
    from llmtop.testing.slotted import TEMPLATE_TOKENS

    with ContextUpstream(TRUE, cache="none") as up:
        outcome = bench(up, str(tmp_path / "b.jsonl"), prompt_tokens=(32, 64), turns=4)
        seen = list(up.state.seen)
    report = build(outcome.log)
    t = [32 + 26 * k for k in range(4)]
    warm_seen, cold_seen = seen[-8:-4], seen[-4:]
    assert [(s[0], s[1]) for s in warm_seen] == [
        (t[0], TEMPLATE_TOKENS), (t[1], t[0] + 4), (t[2], t[1] + 4), (t[3], t[2] + 4)]
    assert [(s[0], s[1]) for s in cold_seen] == [(x + 4, TEMPLATE_TOKENS) for x in t]
    assert [x.context_tokens for x in report.turns] == t
    assert [x.context_tokens for x in report.cold_turns] == [x + 4 for x in t]
    for turn, (total, cached, _ms) in zip(report.cold_turns, cold_seen, strict=True):
        assert turn.record.metrics.prompt_eval_ms == pytest.approx(TRUE.ms(total, cached))
    saved = cache_saving(report.turns, report.cold_turns)
    # turn 1 has no history to cache: no saving is claimed for it (second pass, P13)
    assert sorted(saved) == [2, 3, 4]
    for warm, cold in zip(report.turns[1:], report.cold_turns[1:], strict=True):
        assert saved[warm.turn] == pytest.approx(
            (cold.record.metrics.ttft_ms or 0) - (warm.record.metrics.ttft_ms or 0))
    md = render(report, "md")
    assert "saved by the cache ms" in md and "the cache saved" in md
    data = json.loads(render(report, "json"))
    assert [x["context_tokens"] for x in data["conversation_cold"]] == [x + 4 for x in t]
    assert data["conversation"][3]["saved_ms"] == pytest.approx(saved[4], abs=1e-3)


def test_no_cold_turns_sends_the_conversation_only(tmp_path):
    with ContextUpstream(TRUE, cache="none") as up:
        outcome = bench(up, str(tmp_path / "b.jsonl"), prompt_tokens=(32, 64), turns=3,
                        cold_turns=False)
    report = build(outcome.log)
    assert len(report.turns) == 3 and report.cold_turns == []
    assert "saved by the cache" not in render(report, "md")


def test_a_cache_pair_that_cannot_fit_num_ctx_is_refused_before_anything_is_sent(capsys):
    from llmtop.cli import main
    from llmtop.exitcodes import ExitCode

    with ContextUpstream(TRUE) as up:
        # 2010 + 2 × (12 + 7) suffix tokens + 8 output = 2056 > 2048; without the pair, 2018 fits
        argv = [
            "bench",
            "--engine",
            "ollama",
            "--host",
            up.url,
            "--model",
            "slotted",
            "--prompt-tokens",
            "2010",
            "--max-tokens",
            "8",
            "--num-ctx",
            "2048",
            "--cache-pairs",
            "1",
            "--preflight-duration",
            "0",
        ]
        assert main(argv) == ExitCode.USAGE
        assert up.state.seen == []
    assert "a 2048-token prompt plus 8 output tokens needs 2056 tokens" in capsys.readouterr().err


def _record(
    rid: int, phase: str, count: int, cached: int | None, prefill_ms: float, **fields: object
):  # type: ignore[no-untyped-def]
    from llmtop.sessions.records.request import RequestRecord

    stats = {
        "prompt_eval_count": count,
        "prompt_eval_duration": round(prefill_ms * 1e6),
        "eval_count": 4,
        "eval_duration": 40_000_000,
        "source": "usage + llama.cpp timings",
    }
    if cached is not None:
        stats["prompt_cached_count"] = cached
    return RequestRecord.from_json(
        {
            "id": rid,
            "status": "ok",
            "phase": phase,
            "stats": stats,
            "metrics": {"prompt_eval_ms": prefill_ms},
            **fields,
        }
    )


def test_llama_servers_reported_cache_counts():
    from llmtop.sessions.analysis.context import cache_pairs, conversation

    # docs/protocols.md, llama-server: the same 53-token prompt twice gives cache_n 0 /
    # prompt_n 53, then cache_n 52 / prompt_n 1; prompt_eval_count is prompt_n + cache_n
    cold = _record(1, "cache-cold", 53, 0, 106.0, pair=0)
    warm = _record(2, "cache-warm", 53, 52, 2.0, pair=0)
    (pair,) = cache_pairs([cold, warm])
    assert (pair.source, pair.cached_tokens) == ("reported", 52)
    assert pair.saving_ms_per_token == pytest.approx((106.0 - 2.0) / 52)
    turns = conversation(
        [_record(3, "turn", 53, 0, 106.0, index=0), _record(4, "turn", 110, 56, 110.0, index=1)]
    )
    # the whole prompt as counted, the cached part as reported, the rest evaluated
    assert [(t.context_tokens, t.cached, t.evaluated) for t in turns] == [
        (53, 0, 53),
        (110, 56, 54),
    ]


def test_a_warm_count_a_token_smaller_is_the_suffixes_not_a_cache_report():
    # One pair from a sweep on the embedded engine (which counts every prompt token): a 2,048-
    # token prefix, prompt_eval_count 2,069 cold and 2,068 warm (the two random 12-word
    # suffixes tokenized one token apart), prefill 4,318.171 → 77.154 ms. Read as "1 cached
    # token" it claimed 4,241 ms saved per token; the hit is in the time only, so the prefix's
    # calibrated 2,048 tokens are inferred: (4318.171 − 77.154) / 2048 = 2.0708 ms a token.
    from llmtop.engines.events import ServerStats
    from llmtop.sessions.analysis.context import _pair_of
    from llmtop.sessions.measure.timeline import RequestMetrics
    from llmtop.sessions.records.request import PlanTags, RequestRecord

    def record(phase: str, count: int, ms: float) -> RequestRecord:
        return RequestRecord(
            id=1, status="ok", phase=phase,
            plan=PlanTags(pair=0, prompt_tokens_target=2048, prompt_words=2035),
            stats=ServerStats(prompt_eval_count=count),
            metrics=RequestMetrics(prompt_eval_ms=ms))  # type: ignore[arg-type]

    pair = _pair_of(0, record("cache-cold", 2069, 4318.171), record("cache-warm", 2068, 77.154))
    assert (pair.source, pair.cached_tokens) == ("inferred", 2048)
    assert pair.saving_ms_per_token == pytest.approx(2.0708, abs=1e-4)
    # Ollama leaves the cached tokens out: 2,069 cold, 21 warm → 2,048 reported by the count
    ollama = _pair_of(0, record("cache-cold", 2069, 4318.171), record("cache-warm", 21, 77.154))
    assert (ollama.source, ollama.cached_tokens) == ("prompt_eval_count", 2048)


def test_the_replay_is_cold_on_a_template_that_drops_system_messages(tmp_path):
    # Ollama's default template `{{ .Prompt }}` (the bundled model's case) keeps only the user
    # messages. A replay opened by a system message then sent turn 1 as the very prompt the
    # engine had just cached (measured on the embedded engine: 27 ms against 230 ms cold).
    # Fresh words in the first user message must leave only the template tokens in common.
    from llmtop.testing.slotted import TEMPLATE_TOKENS

    with ContextUpstream(TRUE, cache="none", template="prompt") as up:
        bench(up, str(tmp_path / "b.jsonl"), prompt_tokens=(32, 64), turns=4)
        seen = list(up.state.seen)
    warm_seen, cold_seen = seen[-8:-4], seen[-4:]
    # turn k's prompt: the template's tokens and the k user messages (22 tokens each, as above)
    assert [s[0] for s in warm_seen] == [TEMPLATE_TOKENS + 22 * k for k in range(1, 5)]
    assert [s[0] for s in cold_seen] == [TEMPLATE_TOKENS + 22 * k + 4 for k in range(1, 5)]
    assert [s[1] for s in cold_seen] == [TEMPLATE_TOKENS] * 4
