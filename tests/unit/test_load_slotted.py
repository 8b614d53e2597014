"""`llmtop load` against the slotted scripted server, whose service time is known, so the
expected throughput and queueing are computed from it (llmtop/testing/slotted.py):

    S = prefill + (T − 1) × gap;  closed loop, N users, c slots: throughput = min(N, c) / S
    when the slots never idle (N > c), and a request that waits adds whole service times.

Tolerance: every service can start up to EPS_S late: the server's timers wake on the
loop's clock, which epoll rounds up to whole ms, and a loaded 2-core runner adds scheduling
delay (1–4 ms measured alone; 12 ms a round once, late in a full suite run on 2 cores: 15 ms
allowed). The bounds still tell the right law from its neighbours: with EPS 15 the 4-user
level must lie in 9.2–10.1 req/s, where N / S would give 20 and one slot 5. The server runs
in its own process, so its timers never wait for the measuring process's GIL. Where the
client's own round trip enters (levels that leave slots idle between requests), it is
measured at concurrency 1 (E2E − S) and bounded, never assumed. The service time itself is
read from the server's own clock (its prefill + eval durations): a busy runner can make
every service of a level late (~30 ms each, seen once on CI), and the laws hold with the
service that was served; the server is never faster than S, which is asserted.
"""

from __future__ import annotations

import itertools

import pytest

from llmtop.connect import connect
from llmtop.sessions.measure.config import LoadConfig
from llmtop.sessions.measure.slo import Slo
from llmtop.sessions.runners.load.runner import LoadRunner
from llmtop.testing.slotted import Service, SlottedProcess

SERVICE = Service(slots=2, prefill_s=0.04, tokens=9, gap_s=0.02)  # S = 40 + 8 × 20 = 200 ms
S_MS = SERVICE.service_s() * 1000
EPS_MS = 15.0  # per-service lateness bound (module docstring)
CLIENT_MAX_MS = 20.0  # a loopback request's own overhead on a busy runner, at most


async def sweep(url: str, tmp_path, **config) -> object:
    conn = await connect("ollama", url, "slotted")
    try:
        cfg = LoadConfig(prompt_tokens=30, max_tokens=50, use_cache=False, **config)
        return await LoadRunner(conn, cfg, str(tmp_path / "load.jsonl")).run()
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def closed(tmp_path_factory):
    import asyncio

    up = SlottedProcess(SERVICE)
    try:
        asyncio.run(up.start())
        outcome = asyncio.run(
            sweep(
                up.url,
                tmp_path_factory.mktemp("closed"),
                levels=(1, 2, 4),
                requests=8,
                slo=Slo(ttft_ms=150),
            )
        )
    finally:
        up.stop()
    return outcome.analysis, _served_ms(_records(outcome.log_path))


def _served_ms(records) -> dict[int, float]:
    """Each level's mean service time as the server timed it on its own clock (slot acquired
    → last token: prompt_eval_duration + eval_duration), ms. The script asks S; a busy
    runner makes a service late (its last timer wakes late, ~30 ms a service seen once on
    CI), never early, so the laws below are stated with what was served. `records`: the
    log's records, as dicts."""
    served: dict[int, list[float]] = {}
    for r in records:
        if r["type"] == "request" and r.get("level") is not None:  # the warm-up has none
            st = r["stats"]
            served.setdefault(r["level"], []).append(
                (st["prompt_eval_duration"] + st["eval_duration"]) / 1e6)
    assert all(s > S_MS - 1 for level in served.values() for s in level)
    return {level: sum(v) / len(v) for level, v in served.items()}


def test_closed_loop_every_request_ok_and_tpot_is_the_gap(closed):
    analysis, _served = closed
    for lv in analysis.levels:
        assert (lv.requests, lv.ok) == (8, 8)
        # TPOT = (E2E − TTFT) / (T − 1): both stamps wake on the same absolute deadlines.
        assert lv.tpot.p50 == pytest.approx(SERVICE.gap_s * 1000, abs=1.5)


def test_closed_loop_throughput_is_min_n_c_over_service_time(closed):
    analysis, served = closed
    one, two, four = analysis.levels
    # One user, nothing queues: a request every S + the client's own cycle (its round trip,
    # logging, the next prompt), measured here and bounded.
    cycle_ms = 1000 / one.req_per_s
    client_ms = cycle_ms - served[0]
    assert 0 <= client_ms <= CLIENT_MAX_MS
    # N ≤ c: each user runs the same cycle on its own slot: 8 requests are 4 rounds of a
    # cycle, each up to EPS late, plus one new connection.
    low = 8 * 1000 / (4 * (cycle_ms + EPS_MS) + CLIENT_MAX_MS)
    assert low <= two.req_per_s <= 2 * 1000 / (cycle_ms - EPS_MS)
    # N > c: the slots never idle; 8 requests are 4 rounds of a service as served (level 2,
    # 4 users), each started up to EPS late, plus the first request's way in.
    rounds = 8 / SERVICE.slots
    low = 8 * 1000 / (rounds * (served[2] + EPS_MS) + client_ms)
    assert low <= four.req_per_s <= SERVICE.slots * 1000 / S_MS * 1.01


def test_closed_loop_queueing_adds_a_whole_service_time_to_ttft(closed):
    analysis, served = closed
    _one, two, four = analysis.levels
    # 4 users on 2 slots: after the first round every request waits for one whole service,
    # less the client's re-send time (bounded by CLIENT_MAX_MS).
    s_ms = served[2]  # level 2: 4 users
    added = four.ttft.p50 - two.ttft.p50
    assert s_ms - CLIENT_MAX_MS - EPS_MS <= added <= s_ms + EPS_MS
    # The server's own account (total − prefill − eval) says the same, from its clock.
    assert s_ms - CLIENT_MAX_MS - EPS_MS <= four.queue_ms.p50 <= s_ms + EPS_MS
    assert two.queue_ms.p50 < EPS_MS
    # goodput: TTFT ≤ 150 ms holds until requests queue a whole service (~240 ms).
    assert (two.goodput_share, four.goodput_share) == (1.0, 2 / 8)
    assert analysis.knee.level is two
    assert analysis.knee.sentence == "this engine serves 2 concurrent users within TTFT ≤ 150 ms"


async def test_open_loop_past_saturation_latency_from_the_schedule_keeps_growing(tmp_path):
    service = Service(slots=1, prefill_s=0.04, tokens=9, gap_s=0.02)  # S = 200 ms, 5 req/s max
    async with SlottedProcess(service) as up:
        outcome = await sweep(
            up.url, tmp_path, mode="rate", levels=(10,), requests=6, arrivals="constant"
        )
    (lv,) = outcome.analysis.levels
    records = sorted(
        (r for r in _records(outcome.log_path) if r["type"] == "request" and r.get("level") == 0),
        key=lambda r: r["index"],
    )
    from_schedule = [r["metrics"]["ttft_ms"] + r["lag_ms"] for r in records]
    # Request k is scheduled at k × 100 ms but its slot frees only when request k − 1's
    # service ends: it waits k × (service − 100 ms), the service as the server timed it.
    served = _served_ms(records)[0]
    growth = served - 100
    assert all(later - earlier > growth / 2 for earlier, later in itertools.pairwise(from_schedule))
    slope = (from_schedule[-1] - from_schedule[0]) / (len(from_schedule) - 1)
    assert slope == pytest.approx(growth, abs=EPS_MS)
    # The generator kept its timetable: its lag is a small part of the growth.
    assert lv.lag_ms.p50 < (S_MS - 100) / 5
    assert lv.req_per_s == pytest.approx(1000 / served, rel=(EPS_MS + CLIENT_MAX_MS / 6) / served)
    assert lv.ttft_scheduled.p50 > lv.ttft.p50 - 1  # never less than from the actual send


async def test_open_loop_below_saturation_nothing_queues(tmp_path):
    async with SlottedProcess(SERVICE) as up:
        outcome = await sweep(
            up.url, tmp_path, mode="rate", levels=(4,), requests=6, arrivals="constant"
        )
    (lv,) = outcome.analysis.levels
    # 250 ms apart, 200 ms each, 2 slots: no request waits for a slot.
    assert lv.queue_ms.p50 < 2
    assert (
        SERVICE.prefill_s * 1000
        <= lv.ttft_scheduled.p50
        <= SERVICE.prefill_s * 1000 + CLIENT_MAX_MS
    )


def _records(path):
    import json

    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
