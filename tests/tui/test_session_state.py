"""SessionState (pure): the TTFT series across requests, the labelled gaps, history rows and
compare ratios, from exact stamps. Expected values are worked out by hand in the comments."""

from __future__ import annotations

import math

import pytest

from llmtop.engines.events import ServerStats, StreamEvent
from llmtop.sessions.measure.request import RequestCollector
from llmtop.tui.state.live import LiveRequest
from llmtop.tui.state.session_state import (
    MAX_BARS,
    SessionState,
    clock_time,
    compare,
    finite,
    gaps_view,
    prompt_start,
    ratio,
)
from llmtop.tui.widgets.metrics_strip import gaps_text
from llmtop.tui.widgets.request_history import (
    compare_text,
    decode_cell,
    previous_comparable,
    row_cells,
)
from llmtop.tui.widgets.session_strip import marks_text, summary_text

MS = 1_000_000
SENT = 1_000 * MS


def request(
    ttft_ms: float | None,
    gap_ms: float = 10.0,
    chunks: int = 3,
    eval_count: int | None = 3,
    prompt: str = "p",
    done: bool = True,
    load_ms: float | None = None,
    prefill: tuple[int, float] | None = None,
) -> LiveRequest:
    """A request sent at SENT: `chunks` text chunks from `ttft_ms`, `gap_ms` apart, then (when
    `done`) the done chunk 1 ms after the last one, with the server's eval_count."""
    collector = RequestCollector(
        prompt=prompt, options={}, model="m", wall_start="2026-01-02T03:04:05+01:00", sent_ns=SENT
    )
    live = LiveRequest(collector)
    t = 0.0
    for i in range(chunks if ttft_ms is not None else 0):
        t = ttft_ms + i * gap_ms  # type: ignore[operator]
        event = StreamEvent(SENT + round(t * MS), content=f"w{i}")
        collector.add(event)
        live.add(event)
    if done:
        end = StreamEvent(SENT + round((t + 1.0) * MS), done=True, stats=ServerStats(
            eval_count=eval_count, eval_duration=None if eval_count is None else 40 * MS,
            load_duration=None if load_ms is None else round(load_ms * MS),
            prompt_eval_count=None if prefill is None else prefill[0],
            prompt_eval_duration=None if prefill is None else round(prefill[1] * MS)))
        collector.add(end)
        live.add(end)
        live.finish(collector.finish())
    return live


def test_ttft_series_marks_the_request_on_screen_and_the_noisy_ones() -> None:
    session = SessionState()
    for ttft in (100.0, 150.0, None, 120.0):  # the third got no text: no TTFT, no bar
        session.add(request(ttft))
    session.mark_noisy(session.requests[1], "Chromium is busy")
    streaming = request(200.0, done=False)
    view = session.ttft_view(streaming)
    assert view.values == (100.0, 150.0, 120.0, 200.0)
    assert view.numbers == (1, 2, 4, 5)
    assert view.noisy == (False, True, False, False)
    assert view.current == 3  # the streaming request, once its first chunk came
    # the finished ok requests only (the streaming one is not judged yet): median of 100,
    # 120, 150 = 120
    assert (view.median_ms, view.min_ms, view.max_ms, view.n) == (120.0, 100.0, 150.0, 3)
    assert view.current_vs_median == pytest.approx(200.0 / 120.0)
    assert marks_text(view).plain == " ! ▲"  # one cell per bar
    assert summary_text(view).plain == "median 120.0 ms · 100.0–150.0 · n 3 ok · #5 ×1.67"
    # a request picked in the history is the one marked; the streaming one is not shown then
    view = session.ttft_view(session.requests[1])
    assert view.current == 1 and view.values == (100.0, 150.0, 120.0)
    assert marks_text(view).plain == " ▲ "


def test_ttft_series_keeps_the_last_bars_and_counts_the_version() -> None:
    session = SessionState()
    assert session.ttft_view(None).n == 0 and summary_text(session.ttft_view(None)).plain == (
        "no request yet"
    )
    for i in range(MAX_BARS + 5):
        session.add(request(100.0 + i))
    view = session.ttft_view(None)
    assert len(view.values) == MAX_BARS and view.values[0] == 105.0 and view.numbers[0] == 6
    assert view.n == MAX_BARS + 5 and view.current is None
    version = session.version
    assert session.mark_noisy(session.requests[0], "x") and session.version == version + 1
    assert not session.mark_noisy(session.requests[0], "x") and session.version == version + 1
    with pytest.raises(ValueError):
        session.add(request(1.0, done=False))


def test_gaps_are_chunks_while_streaming_and_tokens_once_counted() -> None:
    session = SessionState()
    first = request(100.0, gap_ms=20.0, chunks=3, eval_count=3)  # TPOT (141 − 100) / 2 = 20.5
    session.add(first)
    live = request(50.0, gap_ms=25.0, chunks=3, done=False)
    view = gaps_view(live, session.previous(live))
    # 3 chunks, 2 gaps of 25 ms: 40 chunk/s, 25 ms per chunk; the label says chunks
    assert view.gaps_ms == (25.0, 25.0) and view.rate == 40.0 and view.tpot_ms == 25.0
    assert gaps_text(view).plain == (
        "chunk gaps ms  TPOT 25.00 ms/chunk · 40.0 chunk/s · prev 20.50 ms/tok"
    )
    done = request(50.0, gap_ms=25.0, chunks=3, eval_count=3)
    session.add(done)
    view = gaps_view(done, session.previous(done))
    # eval_count 3 = 3 chunks: token gaps; TPOT (101 − 50) / 2 = 25.5 ms, 1000 / 25.5 tok/s
    assert view.per_token and view.label == "token gaps ms"
    assert gaps_text(view).plain == (
        "token gaps ms  TPOT 25.50 ms/tok · 39.2 tok/s · prev 20.50 ms/tok"
    )
    assert gaps_view(first, session.previous(first)).previous_tpot_ms is None


def test_gaps_say_how_many_tokens_a_chunk_carried() -> None:
    two_each = request(10.0, gap_ms=20.0, chunks=3, eval_count=6)
    view = gaps_view(two_each, None)
    # 6 tokens in 3 chunks; TPOT (51 − 10) / (6 − 1) = 8.2 ms per token
    assert not view.per_token and view.tokens_per_chunk == 2.0
    assert gaps_text(view).plain == "chunk gaps ms (2.0 tok/chunk)  TPOT 8.20 ms/tok · 122.0 tok/s"
    uncounted = request(10.0, gap_ms=20.0, chunks=3, eval_count=None)
    # no eval_count: the chunk count stands in, TPOT (51 − 10) / 2 = 20.5 ms per chunk
    assert gaps_text(gaps_view(uncounted, None)).plain == (
        "chunk gaps ms  TPOT 20.50 ms/chunk · 48.8 chunk/s"
    )
    one_chunk = request(10.0, chunks=1, done=False)
    assert gaps_text(gaps_view(one_chunk, None)).plain == "chunk gaps ms  TPOT n/a · n/a"


def test_history_rows_and_compare_ratios() -> None:
    session = SessionState()
    session.add(request(100.0, gap_ms=20.0, prompt="why is the sky blue? tell me in detail"))
    session.add(request(150.0, gap_ms=30.0, prompt="second"))
    session.mark_noisy(session.requests[1], "Chromium is busy")
    first, second = session.row(1), session.row(2)
    # TPOT: (141 − 100) / 2 = 20.5 and (211 − 150) / 2 = 30.5; server decode 3 / 0.04 s = 75
    assert row_cells(first)[:6] == ("1", "03:04:05", "100.0", "20.50", "48.8/75.0", "3")
    assert str(row_cells(second)[6]) == "ok" and str(row_cells(second)[7]) == "⚠"
    # the prompt comes last, cut to the room the table gives it (18 before it knows)
    assert row_cells(first)[8] == "why is the sky bl…"
    assert row_cells(first, 12)[8] == "why is the …"
    assert first.prompt == "why is the sky blue? tell me in detail"
    ratios = compare(second, first)
    assert ratios["TTFT"] == 1.5 and ratios["TPOT"] == pytest.approx(30.5 / 20.5)
    assert ratios["decode"] == pytest.approx(20.5 / 30.5) and ratios["srv decode"] == 1.0
    assert ratios["tokens"] == 1.0 and ratios["E2E"] == pytest.approx(211.0 / 141.0)
    assert compare_text(second, first).plain == (
        "#2 ÷ #1  TTFT ×1.50  TPOT ×1.49  decode ×0.67  srv decode ×1.00  tokens ×1.00"
        "  E2E ×1.50"
    )
    assert compare_text(first, None).plain.startswith("#1 is the first request")
    with pytest.raises(IndexError):
        session.row(3)


def cancelled(ttft_ms: float, chunks: int = 3) -> LiveRequest:
    """A request the user cancelled (Esc) after `chunks` chunks: no done chunk, no stats."""
    live = request(ttft_ms, gap_ms=20.0, chunks=chunks, done=False)
    live.finish(live.collector.finish(cancelled=True))
    return live


def test_a_cancelled_row_and_compare_beside_it() -> None:
    # new-user pass D21: a cancelled row read "n/a/n/a", and c on the next request compared it
    # with the cancelled one
    session = SessionState()
    session.add(request(100.0, gap_ms=20.0))
    session.add(cancelled(300.0))
    session.add(cancelled(300.0, chunks=0))  # cancelled before any text
    session.add(request(150.0, gap_ms=30.0))
    rows = [session.row(n) for n in (1, 2, 3, 4)]
    # #2: 3 chunks 20 ms apart, no stats: client (3 − 1) / 0.04 s = 50.0 chunk/s, server —
    assert row_cells(rows[1])[4] == "50.0/—" and str(row_cells(rows[1])[6]) == "cancelled"
    assert row_cells(rows[2])[4] == "n/a"  # neither side has a figure
    before = previous_comparable(rows, rows[3])
    assert before is rows[0]
    assert compare_text(rows[3], before, tuple(rows[1:3])).plain == (
        "#4 ÷ #1 (skipped #2 cancelled, #3 cancelled)  TTFT ×1.50  TPOT ×1.49  decode ×0.67"
        "  srv decode ×1.00  tokens ×1.00  E2E ×1.50"
    )
    # the cancelled one itself, against #1: said, then its figures up to the cancel
    assert previous_comparable(rows, rows[1]) is rows[0]
    assert compare_text(rows[1], rows[0]).plain.startswith(
        "#2 ÷ #1 (#2 cancelled: its figures stop there)  TTFT ×3.00"
    )
    only_cancelled = SessionState()
    only_cancelled.add(cancelled(300.0))
    only_cancelled.add(request(100.0))
    first, second = only_cancelled.row(1), only_cancelled.row(2)
    assert previous_comparable([first, second], second) is None
    assert compare_text(second, None, (first,)).plain == (
        "#2 is the first finished request: nothing before it to compare"
    )
    assert decode_cell(None, 75.0) == "—/75.0" and decode_cell(48.84, 75.0) == "48.8/75.0"


def test_a_request_that_loaded_the_model_is_ok_cold_as_the_report_says_cold_start() -> None:
    session = SessionState()
    session.add(request(1600.0, load_ms=1453.0))  # over COLD_START_MS (1000 ms): cold
    session.add(request(100.0, load_ms=2.0))
    assert str(row_cells(session.row(1))[6]) == "cold-start"  # the report's word
    # new-user pass D3: 826.8 ms is under COLD_START_MS, but against the next request's 0.3
    # ms (over 50 ms and over 10 × 0.3) it is the model's load: cold-start once #2 is there
    fresh = SessionState()
    fresh.add(request(900.0, load_ms=826.8))
    assert str(row_cells(fresh.row(1))[6]) == "ok"  # alone, nothing says what warm is
    fresh.add(request(80.0, load_ms=0.3))
    assert [str(row_cells(fresh.row(n))[6]) for n in (1, 2)] == ["cold-start", "ok"]
    assert str(row_cells(session.row(2))[6]) == "ok"


def test_a_repeated_prompt_served_from_the_cache_is_cached_and_not_in_the_median() -> None:
    # new-user pass N40: Ctrl+R of a 280-word prompt read TTFT 54.8 ms (1296.9 the first
    # time), "ok", and went into the session median; N25: the median counted a cold start
    session = SessionState()
    long = "a long prompt " * 40
    # a cold start: load 706 + prefill 1000 ms, inside its TTFT of 1800 ms
    session.add(request(1800.0, prompt=long, load_ms=706.0, prefill=(490, 1000.0)))
    session.add(request(900.0, prompt=long, prefill=(490, 880.0)))  # warm, not from cache
    session.add(request(55.0, prompt=long, prefill=(490, 30.0)))  # Ctrl+R: from the cache
    session.add(request(60.0, prompt="short", prefill=(5, 1.0)))  # another prompt: not compared
    # per token: 1000/490 = 2.04 ms; 880/490 = 1.80 (88 %: ok); 30/490 = 0.061 (3 % < 25 %)
    assert [session.row(n).status for n in (1, 2, 3, 4)] == ["cold-start", "ok", "cached", "ok"]
    assert session.word(3) == "cached"
    view = session.ttft_view(None)
    # the bars show all four; the statistics are the ok ones: 900 and 60 → median 480
    assert view.values == (1800.0, 900.0, 55.0, 60.0)
    assert (view.median_ms, view.n, view.others) == (480.0, 2, 2)
    assert summary_text(view).plain == "median 480.0 ms · 60.0–900.0 · n 2 ok (+2)"


def test_the_server_saying_it_reused_the_prompt_is_a_cache_hit() -> None:
    from dataclasses import replace

    session = SessionState()
    live = request(80.0, prefill=(100, 50.0))
    assert live.result is not None and live.result.stats is not None
    stats = replace(live.result.stats, prompt_cached_count=90)  # llama.cpp's cache_n: 90 %
    live.result = replace(live.result, stats=stats)
    session.add(live)
    assert session.row(1).status == "cached"


def test_small_helpers() -> None:
    assert finite([1.0, None, math.nan, math.inf, -math.inf, 2.0]) == (1.0, 2.0)
    assert ratio(3.0, 2.0) == 1.5 and ratio(1.0, 0.0) is None and ratio(None, 1.0) is None
    assert clock_time("2026-01-02T03:04:05.123+01:00") == "03:04:05"
    assert clock_time("not a time") == "not a time"
    assert prompt_start("a\nb  c") == "a b c"
    assert prompt_start("x" * 30, 5) == "xxxx…"


def test_a_cold_long_prompt_among_short_ones_is_ok_as_in_the_report() -> None:
    # new-user pass P2: the report called a cold long prompt cached while the TUI said ok;
    # both compare like prompts now (test_analysis_report has the same case)
    session = SessionState()
    for i in range(12):
        session.add(request(70.0, prompt=f"prompt number {i}", prefill=(7, 60.0)))
    long_prompt = "word " * 400
    session.add(request(830.0, prompt=long_prompt, prefill=(400, 820.0)))
    session.add(request(35.0, prompt=long_prompt, prefill=(400, 24.8)))
    assert [session.row(n).status for n in range(1, 15)] == ["ok"] * 13 + ["cached"]


def test_the_warm_ups_among_the_noisy_requests_are_said() -> None:
    # second new-user pass P9: "12 ran while the machine was NOISY" beside the verdict's "11
    # of the 12 measured requests": the warm-up is counted and now said
    from types import SimpleNamespace

    from llmtop.tui.state.bench_state import WARMUP, warm_note

    rows = [SimpleNamespace(phase=WARMUP)] + [SimpleNamespace(phase="measure")] * 11
    assert warm_note(rows) == " (1 of them a warm-up)"  # type: ignore[arg-type]
    assert warm_note(rows[1:]) == ""  # type: ignore[arg-type]
