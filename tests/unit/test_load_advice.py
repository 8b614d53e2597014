"""A load sweep's advice: the knee when a level was over-saturated, and the engine's
parallelism read from a closed loop's queueing (analysis/load.py), on hand-written load
logs whose answers are known."""

from __future__ import annotations

import pytest

from llmtop.sessions.reports.load import as_json, markdown
from tests.unit.test_load_analysis import analyze_records, header, level_records, request

STOP = {"sent": 31, "n": 12, "slope_ms": 25.0, "low_ms": 24.1, "high_ms": 25.9,
        "rise_ms": 275.0, "baseline_ms": 100.0}


def rate_sweep(levels: list[tuple[float, float, bool]]) -> list[dict]:
    """Open-loop levels (offered req/s, wall s, stopped): 4 ok requests each."""
    recs: list[dict] = []
    for i, (value, wall, stopped) in enumerate(levels):
        reqs = [request(i, k, 50, 150, lag=0.0) for k in range(4)]
        level = level_records(i, value, wall, reqs)
        if stopped:
            level[-1]["stopped"] = STOP
        recs += level
    return recs


def test_an_over_saturated_level_puts_the_knee_below_it():
    # offered 1, 2 and 20 req/s; 4 requests each in 4.0, 2.1 and 1.86 s: 1.00, 1.90 and
    # 2.15 req/s served; 20 req/s stopped as over-saturated. The gain rule alone said
    # "still rises at 20 requests/s: sweep higher" (1.90 → 2.15 is +13 %); the engine could
    # not serve 20, so the knee is between 2 and 20
    a = analyze_records(header("rate"), rate_sweep([(1, 4.0, False), (2, 2.1, False),
                                                     (20, 1.86, True)]))
    assert [round(lv.req_per_s, 2) for lv in a.levels] == [1.0, 1.9, 2.15]
    assert a.knee.level is a.levels[1]
    assert a.knee.sentence == (
        "the engine could not keep up with 20 requests/s (stopped as over-saturated, 2.15 "
        "req/s served); throughput still rises at 2 requests/s (1.90 req/s): the knee lies "
        "between the two, sweep between 2 and 20 to find it")
    assert "sweep higher" not in markdown(a)
    assert a.knee.rule.endswith("a level stopped as over-saturated is above the knee")


def test_a_level_served_as_much_as_the_over_saturated_one_is_the_knee():
    # 1, 2 and 20 req/s served 1.00, 2.00 and 2.15 req/s (20 stopped): 2 → 20 adds 7.5 %,
    # under +10 %: throughput stopped rising at 2 req/s
    a = analyze_records(header("rate"), rate_sweep([(1, 4.0, False), (2, 2.0, False),
                                                     (20, 1.86, True)]))
    assert a.knee.level is a.levels[1]
    assert a.knee.sentence.startswith("throughput stops rising at 2 requests/s (2.00 req/s)")


def test_the_lowest_level_over_saturated():
    a = analyze_records(header("rate"), rate_sweep([(20, 1.86, True), (40, 1.8, True)]))
    assert a.knee.level is None
    assert a.knee.sentence == (
        "the engine could not keep up with 20 requests/s (stopped as over-saturated, 2.15 "
        "req/s served), the lowest level tried: sweep lower to find the knee")


def test_no_over_saturated_level_keeps_sweep_higher():
    a = analyze_records(header("rate"), rate_sweep([(1, 4.0, False), (2, 2.0, False)]))
    assert a.knee.level is a.levels[1]
    assert a.knee.sentence.endswith("the highest level tried: sweep higher to find the knee")


def queue_sweep(e2e_1: float, ttft_1: float, users: tuple[int, ...],
                slots: int) -> list[dict]:
    """A closed loop on an engine with `slots` slots whose request is in service e2e_1 ms
    (TTFT ttft_1 of it) and never slows with company: at c users, c − slots wait a turn
    (⌈c / slots⌉ − 1 services each), throughput is min(c, slots) / service."""
    recs: list[dict] = []
    for i, c in enumerate(users):
        rounds = -(-c // slots)
        wait = (rounds - 1) * e2e_1
        wall = 8 * e2e_1 / 1000 / min(c, slots)  # 8 requests at min(c, slots) per service
        reqs = [request(i, k, ttft_1 + wait, e2e_1 + wait) for k in range(8)]
        recs += level_records(i, c, wall, reqs)
    return recs


def test_one_request_at_a_time_is_inferred_from_the_queueing():
    # Ollama serving one at a time (ollama #17556 shape): 2 s per request, TTFT 100 ms. At 4
    # users TTFT is 100 + 3 × 2000 = 6100 ms, E2E 8000, throughput 0.5 req/s as at 1 user:
    # in service = 0.5 × (8000 − 6000) / 1000 = 1.0
    a = analyze_records(header(), queue_sweep(2000, 100, (1, 2, 4), slots=1))
    p = a.parallelism
    assert p is not None and (p.slots, p.at_least, p.level.value) == (1, False, 4)
    assert p.in_service == pytest.approx(1.0)
    assert p.sentence == (
        "1 request at a time, inferred from the queueing at 4 users: TTFT p50 100 → 6100 ms "
        "(+3.0 × the 1-user E2E of 2000 ms), throughput 0.50 → 0.50 req/s: 1.0 requests in "
        "service at once (Little's law)")
    md = markdown(a)
    assert f"Engine parallelism (inferred): {p.sentence}." in md
    assert as_json(a)["parallelism_inferred"]["slots"] == 1


def test_two_slots_and_no_queueing():
    # 2 slots at 4 users: TTFT + one service (2000), E2E 4000, 1.0 req/s → 1.0 × 2000 / 1000
    # = 2.0 in service
    two = analyze_records(header(), queue_sweep(2000, 100, (1, 4), slots=2)).parallelism
    assert two is not None and (two.slots, two.at_least) == (2, False)
    assert two.in_service == pytest.approx(2.0)
    # 8 slots at 4 users: no wait, 2.0 req/s × 2000 ms = 4.0 = the users: at least 4
    wide = analyze_records(header(), queue_sweep(2000, 100, (1, 4), slots=8)).parallelism
    assert wide is not None and (wide.slots, wide.at_least) == (4, True)
    assert wide.sentence.startswith("at least 4 requests at a time, inferred")


def test_parallelism_is_not_inferred_without_a_one_user_level_or_in_an_open_loop():
    assert analyze_records(header(), queue_sweep(2000, 100, (2, 4), slots=1)).parallelism is None
    assert analyze_records(header("rate"), rate_sweep([(1, 4.0, False), (2, 2.0, False)])
                           ).parallelism is None
