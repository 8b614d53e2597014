"""Exact per-request metrics (docs/method.md, "Metrics of one request")."""

import pytest

from llmtop.engines.events import Failure, FailureKind, ServerStats, StreamEvent
from llmtop.sessions.measure.timeline import (
    compute_metrics,
    live_chunk_rate,
    server_decode_tps,
    server_prefill_tps,
)

MS = 1_000_000


def ten_chunks(stats=None):
    # chunks at 500, 520, ..., 680 ms after the send (10 tokens); the done chunk at 680 ms
    events = [StreamEvent((500 + 20 * i) * MS, content=f"t{i}") for i in range(10)]
    events.append(StreamEvent(680 * MS, done=True, stats=stats or ServerStats(eval_count=10)))
    return events


def test_ttft_and_tpot_from_ten_chunks():
    m = compute_metrics(0, ten_chunks())
    assert m.ttft_ms == 500.0
    # (680 - 500) / (10 - 1) = 20.0 ms per token
    assert m.tpot_ms == pytest.approx(20.0)
    assert m.e2e_ms == 680.0
    assert m.itl_ms == (20.0,) * 9
    assert m.output_tokens == 10 and m.tokens_basis == "eval_count"
    # 9 tokens after the first over 180 ms = 50 tok/s
    assert m.client_decode_tps == pytest.approx(50.0)


def test_tokens_fall_back_to_chunks_and_say_so():
    events = ten_chunks()
    events[-1] = StreamEvent(680 * MS, done=True, stats=ServerStats())  # no eval_count
    m = compute_metrics(0, events)
    assert m.output_tokens == 10 and m.tokens_basis == "chunks"
    assert m.tpot_ms == pytest.approx(20.0)


def test_eval_count_drives_tpot_when_chunks_carry_several_tokens():
    # 10 chunks but the server generated 19 tokens: (680 - 500) / 18 = 10.0 ms
    m = compute_metrics(0, ten_chunks(ServerStats(eval_count=19)))
    assert m.tpot_ms == pytest.approx(10.0)


def test_server_decode_rate_ollama_convention():
    # 39 / 0.595078 s = 65.537... tok/s
    assert server_decode_tps(
        ServerStats(eval_count=39, eval_duration=595_078_000)
    ) == pytest.approx(65.54, abs=0.005)


def test_server_prefill_rate():
    # 11 / 0.275489 s = 39.929... tok/s
    stats = ServerStats(prompt_eval_count=11, prompt_eval_duration=275_489_000)
    assert server_prefill_tps(stats) == pytest.approx(39.93, abs=0.005)


def test_one_token_decode_is_not_a_million_tokens_per_second():
    assert server_decode_tps(ServerStats(eval_count=1, eval_duration=1000)) is None


def test_missing_prompt_eval_count_gives_prefill_na():
    assert server_prefill_tps(ServerStats(prompt_eval_duration=275_489_000)) is None
    assert server_prefill_tps(ServerStats(prompt_eval_count=11)) is None
    assert server_prefill_tps(None) is None


def test_overhead_is_ttft_minus_load_and_prompt_eval():
    # the source's relay: TTFT 813.9 ms, prefill 796.1 ms, load ~0 → 17.8 ms of overhead
    events = [StreamEvent(813_900_000, content="a"), StreamEvent(900 * MS, content="b")]
    stats = ServerStats(
        load_duration=1, prompt_eval_duration=796_100_000, eval_count=2, eval_duration=86_100_000
    )
    events.append(StreamEvent(900 * MS, done=True, stats=stats))
    m = compute_metrics(0, events)
    assert m.overhead_ms == pytest.approx(17.8, abs=1e-3)


def test_overhead_na_without_load_duration():
    events = ten_chunks(ServerStats(eval_count=10, prompt_eval_duration=400 * MS))
    assert compute_metrics(0, events).overhead_ms is None


def test_thinking_counts_for_ttft_but_content_is_kept_apart():
    events = [
        StreamEvent(100 * MS, thinking="hmm"),
        StreamEvent(300 * MS, content="answer"),
        StreamEvent(320 * MS, done=True, stats=ServerStats(eval_count=2)),
    ]
    m = compute_metrics(0, events)
    assert m.ttft_ms == 100.0 and m.ttft_content_ms == 300.0


def test_empty_chunks_do_not_count_as_first_token():
    events = [
        StreamEvent(50 * MS),
        StreamEvent(200 * MS, content="x"),
        StreamEvent(210 * MS, done=True),
    ]
    assert compute_metrics(0, events).ttft_ms == 150.0 + 50.0


def test_failed_stream_has_no_e2e():
    events = [
        StreamEvent(100 * MS, content="partial"),
        StreamEvent(150 * MS, done=True, failure=Failure(FailureKind.TRUNCATED, "cut")),
    ]
    m = compute_metrics(0, events)
    assert m.ttft_ms == 100.0 and m.e2e_ms is None and m.tpot_ms is None


def test_live_chunk_rate():
    # 5 chunks over 200 ms → 4 gaps / 0.2 s = 20 chunks/s
    assert live_chunk_rate(0, 200 * MS, 5) == pytest.approx(20.0)
    assert live_chunk_rate(0, None, 1) is None


def test_server_stats_never_invent_zero():
    s = ServerStats.from_mapping(
        {"done": True, "eval_count": 5, "load_duration": "bad", "eval_duration": -3}
    )
    assert s.eval_count == 5 and s.load_duration is None and s.eval_duration is None
    assert s.prompt_eval_count is None
