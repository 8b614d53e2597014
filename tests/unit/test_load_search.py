"""`llmtop load --search` and the over-saturation stop against the slotted scripted server,
whose latency at each concurrency or rate is known by construction (llmtop/testing/slotted.py:
S = prefill + (T − 1) × gap per request, `slots` served at once, FIFO), and the search's pure
parts (analysis/search.py, analysis/saturation.py) on numbers worked out by hand.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from llmtop.connect import connect
from llmtop.sessions.analysis.load import analyze_load
from llmtop.sessions.analysis.saturation import MIN_POINTS, over_saturated
from llmtop.sessions.analysis.search import SloSearch, judge, wilson
from llmtop.sessions.measure.config import LoadConfig
from llmtop.sessions.measure.slo import Slo
from llmtop.sessions.reports.load import markdown
from llmtop.sessions.runners.load.runner import LoadRunner
from llmtop.testing.slotted import Service, SlottedProcess


async def sweep(url: str, path, **config) -> object:
    conn = await connect("ollama", url, "slotted")
    try:
        cfg = LoadConfig(prompt_tokens=30, max_tokens=50, use_cache=False, **config)
        return await LoadRunner(conn, cfg, str(path)).run()
    finally:
        await conn.close()


# --- the pure parts -------------------------------------------------------------------------


def test_wilson_interval_all_met_is_n_over_n_plus_z_squared():
    # k = n: the Wilson low end is 1 / (1 + z²/n) = n / (n + z²), z = 1.959964: for n = 35,
    # 35 / (35 + 3.841459) = 0.901099; for n = 34, 34 / 37.841459 = 0.898485.
    assert wilson(35, 35)[0] == pytest.approx(0.901099, abs=1e-6)
    assert wilson(34, 34)[0] == pytest.approx(0.898485, abs=1e-6)
    assert [judge(1, n, n).outcome for n in (34, 35)] == ["undecided", "meets"]
    # 32 of 40 = 0.8: centre (0.8 + z²/80) / (1 + z²/40) = 0.773714, half-width
    # z √(0.8·0.2/40 + z²/6400) / (1 + z²/40) = 0.121287: high 0.895000 < 0.90.
    assert wilson(32, 40)[1] == pytest.approx(0.895000, abs=1e-5)
    assert judge(5, 32, 40).outcome == "misses"
    assert judge(5, 16, 20).outcome == "undecided"  # high 0.919 straddles 0.90
    assert judge(9, 40, 40, stopped=True).outcome == "misses"  # over-saturated: a miss


def test_bad_counts_and_bounds_are_clear_errors():
    with pytest.raises(ValueError, match="cannot meet"):
        wilson(5, 4)
    with pytest.raises(ValueError, match="two bounds"):
        SloSearch("concurrency", 4, 4)
    with pytest.raises(ValueError, match="--slo"):
        LoadConfig(levels=(1, 8), search=True)
    with pytest.raises(ValueError, match="two levels"):
        LoadConfig(levels=(8,), search=True, slo=Slo(ttft_ms=100))


def test_rate_bisection_narrows_to_the_resolution():
    # A server that meets the SLO up to 7.3 req/s. Bounds 1 and 16: 1 meets, 16 misses, then
    # midpoints to 3 significant digits: 8.5 (miss), 4.75 (meet), 6.625 → 6.62 (meet; the
    # float 6.625 rounds half to even), 7.56 (miss), 7.09 (meet); 7.56 / 7.09 = 1.066 ≤ 1.10:
    # done, answer 7.09 in [7.09, 7.56).
    search = SloSearch("rate", 1, 16)
    tried = []
    while (value := search.next_value()) is not None:
        tried.append(value)
        search.add(judge(value, 40, 40) if value <= 7.3 else judge(value, 0, 40))
    print(tried)
    assert tried == [1, 16, 8.5, 4.75, 6.62, 7.56, 7.09]
    result = search.result(Slo(ttft_ms=100))
    assert (result.answer, result.above, result.exact) == (7.09, 7.56, True)
    assert "answer in [7.09, 7.56) req/s, within 7%" in result.sentence


def test_saturation_rule_on_a_known_ramp_and_a_flat_level():
    # Overload by construction: 1 slot, S = 50 ms, a request every 25 ms: request k waits
    # k × (50 − 25) ms, so TTFT = 10 + 25 k: the slope is 25 ms per request exactly.
    ramp = [(k, 10.0 + 25 * k) for k in range(MIN_POINTS)]
    assert over_saturated(ramp[:-1], sent=20) is None  # 11 points: too few to judge
    stop = over_saturated(ramp, sent=25)
    assert stop is not None
    assert (stop.sent, stop.n, stop.slope_ms) == (25, 12, pytest.approx(25.0))
    # rise = 25 × 11 = 275 ms over a baseline of median(10, 35, 60) = 35 ms
    assert (stop.rise_ms, stop.baseline_ms) == (pytest.approx(275.0), 35.0)
    # A stable level: TTFT alternating 10 / 12 ms has no trend (Theil–Sen slope 0).
    flat = [(k, 10.0 + 2 * (k % 2)) for k in range(40)]
    assert over_saturated(flat, sent=40) is None
    # A significant but immaterial trend (0.1 ms per request over 40 requests = 3.9 ms on
    # a 100 ms level) is not over-saturation: latency has not doubled.
    assert over_saturated([(k, 100.0 + 0.1 * k) for k in range(40)], sent=40) is None


# --- against the slotted server -------------------------------------------------------------

# 4 slots (c), prefill p = 10 ms, S = 10 + (40 − 1) × 10 = 400 ms. The SLO: TTFT ≤ L = 55 ms.
# N ≤ 4 users: every request has a slot at once: TTFT = p + the client's own overhead o
#   (a few ms; under 45 ms even on a loaded 2-core runner): all meet; 20/20 → Wilson low
#   0.839 (undecided), 40/40 → 0.912: meets, in 2 batches (a rare slow request only adds a
#   batch: 59/60 → 0.911).
# N > 4: the slots never idle, so throughput is c / S and each user's cycle N·S / c (Little's
#   law); a cycle is δ (the client's turnaround, ≤ 10 ms) + wait + S, so the mean wait is at
#   least S (N − c) / c − δ (N = 5: 90 ms). No request waits more than (N − c) · S. If a share
#   q ≥ 0.9 met TTFT ≤ L, the mean TTFT would be ≤ q·L + (1 − q)(p + (N − c)·S + o) — for
#   N = 5, ≤ 49.5 + 46 = 95.5 ms against at least p + 90 = 100 ms, and worse for every larger
#   N — so the share is below 90 % at every N > 4: a miss (or, while the interval straddles,
#   undecided, which bisects as a miss). How the misses spread over requests depends on δ,
#   so only the bound is asserted there.
# Bisection over [1, 16]: 1 meets, 16 misses, 8 misses, 4 meets, 6 misses, 5 misses:
# the bracket [4, 5) is one user wide, so the answer is 4 users, exactly the slot count.
SEARCH_SERVICE = Service(slots=4, prefill_s=0.01, tokens=40, gap_s=0.01)


async def test_slo_search_finds_the_slot_count_exactly(tmp_path):
    async with SlottedProcess(SEARCH_SERVICE) as up:
        outcome = await sweep(up.url, tmp_path / "search.jsonl", levels=(1, 16), requests=20,
                              slo=Slo(ttft_ms=55), search=True)
    search = outcome.analysis.search
    assert search is not None
    assert [p.value for p in search.points] == [1, 16, 8, 4, 6, 5]
    one, sixteen, eight, four, six, five = search.points
    assert (one.outcome, four.outcome) == ("meets", "meets")
    assert one.requests >= 40 and four.requests >= 40 and one.low >= 0.9 and four.low >= 0.9
    for p in (sixteen, eight, six, five):
        assert p.outcome != "meets" and p.share < 0.9
    assert (search.answer, search.above, search.exact) == (4, 5, True)
    assert [lv.repeats for lv in outcome.analysis.levels] == [p.repeats for p in search.points]
    # the report (from the log alone) says the same, with the uncertainty
    again = analyze_load(outcome.log_path).search
    assert again == search
    md = markdown(outcome.analysis)
    assert ("**SLO search:** highest concurrency meeting TTFT ≤ 55 ms for ≥ 90% of requests: "
            f"4 users (meets: {four.share:.0%} of {four.requests} (95 % CI ") in md
    assert "— answer in [4, 5) users, exact." in md
    assert (f"| 4 | 4 users | {four.requests} ({four.repeats}) | {four.met} | {four.share:.0%} | "
            f"{four.low:.1%}–{four.high:.1%} | meets |") in md


# 1 slot, S = 10 + (5 − 1) × 10 = 50 ms (20 req/s), sent 40 req/s on a constant timetable:
# request k leaves at 25 k ms and starts at 50 k ms, so its TTFT from the schedule is
# 10 + 25 k ms: it grows 25 ms per request (S − 1/λ), plus each service's lateness ε (the
# server's timers on a loaded 2-core runner: up to EPS_MS = 10 ms, as test_load_slotted.py
# allows). The rule fires at the 12th answer (MIN_POINTS), which ends at 12 × (50 + ε) ms;
# by then requests 0 … ⌊12 (50 + ε) / 25⌋ have left: 25 for ε = 0, at most 29 for ε ≤ 10 ms,
# and none leaves after it. Without the stop all 200 would be sent (5 s) and the last would
# wait 200 × 25 = 5 s.
SATURATED = Service(slots=1, prefill_s=0.01, tokens=5, gap_s=0.01)
EPS_MS = 10.0


async def test_open_loop_beyond_capacity_stops_early_and_says_why(tmp_path):
    async with SlottedProcess(SATURATED) as up:
        outcome = await sweep(up.url, tmp_path / "sat.jsonl", mode="rate", levels=(40,),
                              requests=200, arrivals="constant")
        calm = await sweep(up.url, tmp_path / "calm.jsonl", mode="rate", levels=(10,),
                           requests=20, arrivals="constant")
    (lv,) = outcome.analysis.levels
    stop = lv.stopped
    assert stop is not None
    assert stop.n == MIN_POINTS
    assert 25 <= stop.sent <= 29
    assert 25.0 - 2.0 <= stop.slope_ms <= 25.0 + EPS_MS  # 2 ms: the client's own jitter
    assert lv.requests == stop.sent and lv.ok >= MIN_POINTS
    assert set(lv.statuses) == {"ok", "cancelled"}
    md = markdown(outcome.analysis)
    assert f"- level 40 req/s stopped after {stop.sent} requests: TTFT grew " in md
    assert "ms per request (95 % CI" in md
    # 10 req/s on a 20 req/s server: 100 ms apart, 50 ms each: nothing queues, no stop.
    (ok,) = calm.analysis.levels
    assert (ok.stopped, ok.requests, ok.ok) == (None, 20, 20)


def test_no_early_stop_flag_and_search_flags_reach_the_config(capsys):
    from llmtop.cli import main
    from llmtop.exitcodes import ExitCode

    rc = main(["load", "--engine", "ollama", "--host", "127.0.0.1:9", "--search"])
    assert rc == ExitCode.USAGE
    assert "--search finds the highest level meeting an SLO" in capsys.readouterr().err
    rc = main(["load", "--engine", "ollama", "--host", "127.0.0.1:9", "--search",
               "--slo", "ttft=1s", "--rate", "2"])
    assert rc == ExitCode.USAGE
    assert "two levels" in capsys.readouterr().err


def _records(path):
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


_ = asyncio  # the async tests run on pytest-asyncio's loop (auto mode)
