"""Streams whose text was held back (llmtop/sessions/measure/timeline.py, `buffering`): client rates
become n/a with the reason, TTFT is the time to the whole answer, server rates stay."""

from __future__ import annotations

from llmtop.engines.events import ServerStats, StreamEvent
from llmtop.sessions.measure.timeline import compute_metrics

MS = 1_000_000
SENT = 10**12


def stream(stamps_ms: list[float], done_ms: float, stats: ServerStats,
           text: str = "x") -> list[StreamEvent]:
    events = [StreamEvent(SENT + int(t * MS), content=text) for t in stamps_ms]
    return [*events, StreamEvent(SENT + int(done_ms * MS), done=True, stats=stats)]


STATS = ServerStats(eval_count=100, eval_duration=2_000 * MS, load_duration=1 * MS,
                    prompt_eval_count=50, prompt_eval_duration=100 * MS)


def test_one_piece_for_a_hundred_tokens_is_buffered() -> None:
    # the whole answer in one piece: 100 tokens of text (a token is at least a character:
    # "x" alone for 100 tokens would be impossible counts, timeline.impossible_counts)
    m = compute_metrics(SENT, stream([3_000.0], 3_001.0, STATS, "word " * 100), STATS)
    assert m.buffered is not None and m.buffered.startswith("1 text chunk for 100 tokens")
    assert (m.tpot_ms, m.client_decode_tps, m.overhead_ms) == (None, None, None)
    assert m.ttft_ms == 3_000.0  # kept: the time to the whole answer
    assert m.server_decode_tps == 50.0  # 100 tokens / 2 s
    assert m.server_prefill_tps == 500.0  # 50 tokens / 0.1 s


def test_many_chunks_in_a_burst_are_buffered() -> None:
    # 40 chunks (≥ 25 % of 100 tokens) but all within 39 ms of a 2000 ms decode (< 25 %)
    stamps = [3_000.0 + i for i in range(40)]
    m = compute_metrics(SENT, stream(stamps, 3_040.0, STATS), STATS)
    assert m.buffered is not None
    assert "arrived within 39.0 ms while the server took 2000.0 ms" in m.buffered
    assert m.tpot_ms is None and m.itl_ms == (1.0,) * 39


def test_a_token_per_chunk_stream_is_not_buffered() -> None:
    # 100 chunks 20 ms apart from 120 ms: the text spans 1980 ms of the 2000 ms decode
    stamps = [120.0 + 20 * i for i in range(100)]
    m = compute_metrics(SENT, stream(stamps, 2_100.0, STATS), STATS)
    assert m.buffered is None
    assert m.tpot_ms == (2_100.0 - 120.0) / 99  # (E2E − TTFT) / (n − 1) = 20 ms
    assert m.overhead_ms == 120.0 - (1.0 + 100.0)


def test_too_few_tokens_cannot_be_judged() -> None:
    few = ServerStats(eval_count=5, eval_duration=100 * MS)
    m = compute_metrics(SENT, stream([50.0], 51.0, few), few)
    assert m.buffered is None and m.tpot_ms == (51.0 - 50.0) / 4


def test_a_log_record_holding_nan_is_skipped_not_shown(tmp_path) -> None:
    # Python's json writes NaN; JSON has no NaN; a NaN would crash a Sparkline and poison medians
    import json

    from llmtop.sessions.records.log import read_log

    good = {"type": "request", "id": 1, "status": "ok", "metrics": {"ttft_ms": 12.5}}
    bad = {"type": "request", "id": 2, "status": "ok", "metrics": {"ttft_ms": float("nan")}}
    words = {"type": "request", "id": 3, "status": "ok", "prompt": "NaN and Infinity as words"}
    path = tmp_path / "s.jsonl"
    header = {"type": "header", "format": 1}
    path.write_text("".join(json.dumps(r) + "\n" for r in (header, good, bad, words)))
    log = read_log(str(path))
    assert [r.id for r in log.requests] == [1, 3]
    assert any("line 3" in w and "NaN" in w for w in log.warnings), log.warnings


def test_the_report_says_which_requests_were_buffered(tmp_path) -> None:
    import json

    from llmtop.sessions.records.log import read_log
    from llmtop.sessions.reports.formats import render
    from llmtop.sessions.reports.run import build

    reason = "1 text chunk for 100 tokens: held back"
    records = [
        {"type": "header", "format": 1, "kind": "session"},
        {"type": "request", "id": 1, "status": "ok", "metrics": {"ttft_ms": 3000.0,
                                                                 "buffered": reason}},
        {"type": "request", "id": 2, "status": "ok", "metrics": {"ttft_ms": 120.0}},
    ]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    text = render(build(read_log(str(path))), "md")
    assert (f"**1 request was a buffered stream** (e.g. request 1: {reason}): their client "
            "TPOT, decode rate and overhead are n/a") in text
