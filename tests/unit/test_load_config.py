"""Pure parts of `llmtop load`: SLO terms, levels, durations, the open loop's timetable."""

from __future__ import annotations

import random

import pytest

from llmtop.sessions.measure.config import LoadConfig
from llmtop.sessions.measure.slo import Slo, parse_duration_ms
from llmtop.sessions.runners.load.config import arrival_offsets, parse_levels


def test_slo_parses_units_and_judges_every_term():
    slo = Slo.parse("ttft=500ms, tpot=50, e2e=10s")
    assert slo == Slo(500.0, 50.0, 10_000.0)
    assert slo.describe() == "TTFT ≤ 500 ms / TPOT ≤ 50 ms / E2E ≤ 10000 ms"
    assert slo.met(500, 50, 10_000)  # limits are inclusive
    assert not slo.met(501, 10, 100)
    assert not slo.met(100, None, 100)  # a set term with no value (n/a) is not met
    assert Slo.parse("").empty and Slo().describe() == "no SLO"
    assert Slo.from_dict(slo.to_dict()) == slo


@pytest.mark.parametrize("bad", ["ttft", "latency=5ms", "ttft=5h", "ttft=-1ms", "ttft=1,ttft=2"])
def test_slo_rejects_bad_terms(bad):
    with pytest.raises(ValueError):
        Slo.parse(bad)


def test_durations_and_levels():
    assert parse_duration_ms("1.5m") == 90_000.0
    assert parse_duration_ms("60", "s") == 60_000.0
    assert parse_levels("8,1,2,2", whole=True) == (1, 2, 8)
    assert parse_levels("0.5,2", whole=False) == (0.5, 2.0)
    for bad, whole in (("1.5", True), ("0", True), ("-1", False), ("x", False), ("nan", False)):
        with pytest.raises(ValueError):
            parse_levels(bad, whole)


def test_config_needs_requests_or_duration():
    with pytest.raises(ValueError):
        LoadConfig(requests=None, duration_s=None)
    with pytest.raises(ValueError):
        LoadConfig(requests=10, duration_s=5.0)
    assert LoadConfig(mode="rate", levels=(0.5,), requests=3).level_label(0.5) == "0.5 req/s"


def test_constant_arrivals_are_evenly_spaced():
    assert arrival_offsets(4.0, 3, "constant", seed=1) == [0.0, 0.25, 0.5]


def test_poisson_arrivals_are_seeded_exponential_gaps():
    # The same draws, made independently: gaps ~ Exp(rate), first request at 0.
    rng = random.Random(7)
    gaps = [rng.expovariate(2.0) for _ in range(3)]
    expected = [0.0, gaps[0], gaps[0] + gaps[1], gaps[0] + gaps[1] + gaps[2]]
    assert arrival_offsets(2.0, 4, "poisson", seed=7) == pytest.approx(expected)
    many = arrival_offsets(2.0, 4001, "poisson", seed=3)
    assert many[-1] / 4000 == pytest.approx(0.5, rel=0.05)  # mean gap 1/rate (n = 4000)
    with pytest.raises(ValueError):
        arrival_offsets(0, 3, "constant", 1)
