"""Attribution of slow requests to a busy application, on synthetic log records."""

from __future__ import annotations

import json

import pytest

from llmtop.sessions.analysis.attribution import (
    MAD_SCALE,
    NOTHING_STANDS_OUT,
    attribute,
    robust_slow,
)
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.records.schema import ProbeRecord

# 23 measured requests, ids 1..23. Slow: 8-12 and 19-22 (9 requests, decode 14.0-17.5 tok/s,
# values from the source's contaminated run); fast: the other 14 (21.9 / 22.0 / 22.1 cycled).
SLOW = [8, 9, 10, 11, 12, 19, 20, 21, 22]
SLOW_TPS = [14.0, 14.8, 15.2, 15.6, 16.0, 16.7, 16.9, 17.0, 17.5]
FAST = [i for i in range(1, 24) if i not in SLOW]
FAST_TPS = [(21.9, 22.0, 22.1)[n % 3] for n in range(14)]  # 5 × 21.9, 5 × 22.0, 4 × 22.1


def request(rid: int, tps: float, phase: str = "measure") -> RequestRecord:
    return RequestRecord.from_json({
        "type": "request", "id": rid, "index": rid, "phase": phase, "status": "ok",
        "metrics": {"server_decode_tps": tps, "ttft_ms": 1000.0 / tps},
    })


def probe(
    rid: int | None, apps: list[tuple[str, str, float | None]], warming: bool = False
) -> ProbeRecord:
    return ProbeRecord.from_json({
        "type": "probe",
        "request_id": rid,
        "processes": {
            "warming_up": warming,
            "apps": [{"app": a, "category": c, "cpu_percent": cpu} for a, c, cpu in apps],
        },
    })


def records(
    chromium_slow: tuple[float, float], chromium_fast: tuple[float, float]
) -> tuple[list, list]:
    """Two probe samples per request. llmtop and the engine differ wildly but are excluded."""
    reqs = [request(0, 5.0, phase="warmup")]  # the cold warm-up: never counted
    tps = dict(zip(SLOW, SLOW_TPS, strict=True)) | dict(zip(FAST, FAST_TPS, strict=True))
    reqs += [request(i, tps[i]) for i in range(1, 24)]
    probes = [probe(0, [("chromium", "browser", 300.0)])]
    for i in range(1, 24):
        slow = i in SLOW
        for k in range(2):
            chromium = (chromium_slow if slow else chromium_fast)[k]
            apps = [
                ("chromium", "browser", chromium),
                ("llmtop", "llmtop", 60.0 if slow else 1.0),
                ("ollama", "measured engine", 400.0 if slow else 100.0),
                ("bash", "other", 0.5),
            ]
            probes.append(probe(i, apps))
    probes.append(probe(None, [("make", "build/compiler", 200.0)]))  # between requests
    return reqs, probes


def test_robust_rule_finds_the_slow_requests() -> None:
    values = dict(zip(SLOW, SLOW_TPS, strict=True)) | dict(zip(FAST, FAST_TPS, strict=True))
    slow, med, spread = robust_slow(values)
    # sorted: 9 slow values, then 5 × 21.9 → the 12th of 23 is 21.9 = median.
    # |x − 21.9|: 5 × 0, 5 × 0.1, 4 × 0.2, then the 9 slow ones (4.4 … 7.9) → MAD = 12th = 0.2
    # spread = max(1.4826 × 0.2, 1 % × 21.9) = 0.29652; slow: below 21.9 − 2 × 0.29652 = 21.307
    assert med == 21.9
    assert spread == pytest.approx(MAD_SCALE * 0.2)
    assert sorted(slow) == SLOW


def test_chromium_is_named_with_exact_evidence() -> None:
    reqs, probes = records(chromium_slow=(36.0, 40.0), chromium_fast=(0.0, 2.0))
    got = attribute(reqs, probes)
    # chromium: (36 + 40) / 2 = 38 % in every slow request, (0 + 2) / 2 = 1 % in every fast one
    assert got.culprit == "chromium"
    assert (
        got.evidence == "chromium: 38 % CPU during the 9 slow requests, 1 % during the 14 fast ones"
    )
    assert list(got.slow_ids) == SLOW and list(got.fast_ids) == FAST
    assert [(a.app, a.slow_mean, a.fast_mean, a.diff) for a in got.per_app] == [
        ("chromium", 38.0, 1.0, 37.0),
        ("bash", 0.5, 0.5, 0.0),
    ]  # llmtop (category "llmtop") and ollama ("measured engine") are excluded
    data = json.loads(json.dumps(got.to_dict()))
    assert data["culprit"] == "chromium" and data["per_app"][0]["diff_cpu"] == 37.0
    assert data["median"] == 21.9 and data["k"] == 2.0


def test_nothing_stands_out_names_no_one() -> None:
    reqs, probes = records(chromium_slow=(4.0, 6.0), chromium_fast=(2.0, 4.0))
    got = attribute(reqs, probes)
    # chromium 5 % vs 3 %: 2 points ≤ 10 → no culprit, even though the requests were slow
    assert got.culprit is None
    assert (
        got.evidence
        == NOTHING_STANDS_OUT
        == "no application's CPU differs between slow and fast requests"
    )
    assert got.per_app[0].app == "chromium" and got.per_app[0].diff == 2.0
    assert len(got.slow_ids) == 9


def test_explicit_slow_ids_from_a_drift_window() -> None:
    reqs, probes = records(chromium_slow=(36.0, 40.0), chromium_fast=(0.0, 2.0))
    got = attribute(reqs, probes, slow_ids={19, 20, 21, 22, 23})  # the last 5
    # slow side: 19-22 at 38 %, 23 at 1 % → (4 × 38 + 1) / 5 = 30.6
    # fast side: 18 requests; 8-12 at 38 %, 13 others at 1 % → (5 × 38 + 13) / 18 = 11.277…
    # difference 19.32 > 10 → chromium
    assert got.culprit == "chromium"
    assert (
        got.evidence
        == "chromium: 31 % CPU during the 5 slow requests, 11 % during the 18 fast ones"
    )
    assert got.median is None and got.spread is None


def test_no_slow_requests() -> None:
    reqs = [request(i, 22.0 + (i % 2) * 0.1) for i in range(1, 11)]
    got = attribute(reqs, [probe(i, [("chromium", "browser", 50.0)]) for i in range(1, 11)])
    assert got.culprit is None and got.slow_ids == ()
    assert (
        got.evidence
        == "no slow requests: every server_decode_tps is within 2 × spread of the median"
    )


def test_lower_is_better_metric() -> None:
    reqs, probes = records(chromium_slow=(36.0, 40.0), chromium_fast=(0.0, 2.0))
    got = attribute(reqs, probes, metric="ttft_ms", higher_is_better=False)
    assert got.culprit == "chromium" and list(got.slow_ids) == SLOW


def test_no_probe_records_cannot_attribute() -> None:
    reqs, _ = records(chromium_slow=(36.0, 40.0), chromium_fast=(0.0, 2.0))
    got = attribute(reqs, [])
    assert got.culprit is None
    assert (
        got.evidence == "no probe samples overlap the slow or the fast requests: cannot attribute"
    )


def test_absent_app_counts_as_zero_and_unknown_is_skipped() -> None:
    reqs = [request(i, 22.0) for i in range(1, 6)] + [request(6, 10.0)]
    probes = [probe(i, [("bash", "other", 0.0)]) for i in range(1, 6)]
    # request 6 (slow): two samples with make at 30 and 50, one sample where make is unknown,
    # one warming-up sample (ignored entirely)
    probes += [
        probe(6, [("make", "build/compiler", 30.0)]),
        probe(6, [("make", "build/compiler", 50.0)]),
        probe(6, [("make", "build/compiler", None)]),
        probe(6, [("make", "build/compiler", 900.0)], warming=True),
    ]
    got = attribute(reqs, probes)
    assert got.slow_ids == (6,)
    assert got.culprit == "make"
    assert got.evidence == "make: 40 % CPU during the 1 slow request, 0 % during the 5 fast ones"


def test_tie_names_no_one() -> None:
    reqs = [request(i, 22.0) for i in range(1, 6)] + [request(6, 10.0)]
    probes = [probe(i, []) for i in range(1, 6)]
    probes.append(probe(6, [("a", "other", 30.0), ("b", "other", 30.0)]))
    got = attribute(reqs, probes)
    assert got.culprit is None
    assert got.evidence == NOTHING_STANDS_OUT + " alone (a and b tie)"


def test_the_sources_contaminated_series_needs_explicit_slow_ids() -> None:
    # docs/method.md, "Quiet machine": 12 of 25 slow → the median (19.8) lies between the groups,
    # MAD = 2.2, spread = 1.4826 × 2.2 = 3.262, limit 19.8 − 6.52 = 13.28: nothing below it.
    series = [21.9, 21.9, 22.0, 22.0, 22.0, 21.0, 21.0, 16.9, 17.8, 17.0, 17.0, 17.5, 18.7,
              21.7, 21.9, 20.3, 21.5, 19.8, 21.4, 16.7, 14.0, 14.8, 16.0, 15.2, 15.6]
    slow, med, spread = robust_slow(dict(enumerate(series, start=1)))
    assert med == 19.8 and spread == pytest.approx(1.4826 * 2.2)
    assert slow == set()


def test_a_burner_through_the_whole_run_is_named_from_the_noisy_samples():
    """New-user pass D1: a burner running through every request slows slow and fast ones
    alike, so the contrast names no one; the NOISY samples still say who was busy."""
    from llmtop.sessions.analysis.attribution import noisy_busiest

    def noisy(rid, apps):
        return ProbeRecord.from_json({
            "type": "probe", "request_id": rid, "verdict": {"quiet": False},
            "processes": {"warming_up": False, "apps": [
                {"app": a, "category": c, "cpu_percent": cpu} for a, c, cpu in apps]}})

    hog = ("python3 -c …#8c84", "other", 99.0)
    probes = [noisy(1, [hog, ("slack", "other", 12.0)]),
              noisy(2, [("python3 -c …#8c84", "other", 100.0), ("llmtop", "llmtop", 300.0)]),
              noisy(3, [("slack", "other", 40.0)]),  # the hog absent here: 0 in its median
              probe(4, [("slack", "other", 90.0)])]  # QUIET: not counted
    found = noisy_busiest(probes)
    # hog: median of 99, 100, 0 = 99; slack: median of 12, 0, 40 = 12; llmtop left out
    assert found is not None and (found.app, found.cpu_median, found.samples) == (
        "python3 -c …#8c84", 99.0, 3)
    assert found.sentence() == ("busiest other app in those samples: **python3 -c …#8c84** "
                                "(median 99 % of one core in 3 of them)")
    assert noisy_busiest([probe(4, [hog])]) is None  # no NOISY sample


def test_the_noisy_samples_say_why_and_a_0_percent_app_is_not_named():
    # new-user pass N5: "2 of 11 probe samples found the machine NOISY; busiest other app in
    # those samples: kernel threads (median 0 % of one core in 2 of them)", and not why
    from llmtop.sessions.analysis.attribution import noisy_busiest
    from llmtop.sessions.analysis.machine import NoisyFinding, noisy_findings

    bg = {"code": "background-cpu", "level": "warn", "message": "other programs are using 33 %"}
    bg_fail = {**bg, "level": "fail", "message": "other programs are using 62 %"}
    swap = {"code": "swap", "level": "warn", "message": "the machine is swapping"}

    def noisy(rid, findings, apps=(("kernel threads", "other", 0.4),)):
        return ProbeRecord.from_json({
            "type": "probe", "request_id": rid,
            "verdict": {"quiet": False, "findings": list(findings)},
            "processes": {"warming_up": False, "apps": [
                {"app": a, "category": c, "cpu_percent": cpu} for a, c, cpu in apps]}})

    probes = [noisy(1, [bg]), noisy(2, [bg_fail, swap]), noisy(3, [swap]),
              noisy(4, [bg]), probe(5, [("slack", "other", 90.0)])]  # the last: QUIET
    assert noisy_findings(probes) == [
        # background-cpu in 3 samples, its worst level FAIL (sample 2) with that level's
        # message, not sample 4's warn; FAIL in 1, WARN in 2
        NoisyFinding("background-cpu", "fail", "other programs are using 62 %", 3, 1, 2),
        NoisyFinding("swap", "warn", "the machine is swapping", 2, 0, 2),
    ]
    assert noisy_busiest(probes) is None  # kernel threads at 0.4 %: under 1 %, no one named
    assert noisy_findings([probe(5, [("slack", "other", 90.0)])]) == []
