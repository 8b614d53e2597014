"""The one verdict (analysis/verdict.py) and the drift rule's two directions."""

from __future__ import annotations

from llmtop.sessions.analysis.episodes import Episode
from llmtop.sessions.analysis.run import analyze
from llmtop.sessions.analysis.verdict import SizeEvidence, Word, judge
from llmtop.sessions.measure.stats import drift
from llmtop.sessions.records.schema import ProbeRecord
from tests.unit.test_analysis_report import record

EPISODE = Episode(7, 12, tuple(range(7, 13)), {"server_decode_tps": -31.0})


def test_a_noisy_machine_is_never_clean():
    # issue 25: CLEAN while 717 of 717 probe samples said NOISY (every request overlapped one)
    steady = SizeEvidence("200 tok", baseline_n=25, required=25)
    v = judge([steady], noisy=(25, 25))
    assert v.word == Word.CONTAMINATED
    assert v.reasons == (
        "the probes found the machine NOISY during 25 of the 25 measured requests",
    )
    # a tenth of the requests is not more than a tenth (NOISY_SHARE 0.10, compare's share):
    # clean; one more is contaminated. New-user pass N13: CLEAN with 5 of 14 requests NOISY,
    # while compare called the same run NOT ATTRIBUTABLE
    assert judge([steady], noisy=(2, 20)).word == Word.CLEAN
    assert judge([steady], noisy=(3, 20)).word == Word.CONTAMINATED
    assert judge([steady], noisy=(5, 14)).word == Word.CONTAMINATED


def test_episodes_excluded_or_left_short():
    done = SizeEvidence("200 tok", episodes=(EPISODE,), baseline_n=25, required=25)
    v = judge([done])
    assert v.word == Word.CLEAN_AFTER_REMEASURING and v.label == "CLEAN AFTER RE-MEASURING"
    assert v.reasons == (
        (
            "200 tok: episodes excluded (requests 7–12); the baseline is the 25 "
            "requests outside them"
        ),
    )
    short = SizeEvidence("200 tok", episodes=(EPISODE,), baseline_n=19, required=25)
    assert judge([short]).word == Word.CONTAMINATED
    trend = SizeEvidence(
        "200 tok", trends={"decode (server) tok/s": -27.0}, baseline_n=25, required=25
    )
    assert judge([trend]).reasons == (
        (
            "200 tok: decode (server) tok/s is a trend the whole way "
            "(-27 % from the first to the last request)"
        ),
    )
    assert judge([SizeEvidence("200 tok", judged=False)]).word == Word.INCONCLUSIVE


def test_a_run_that_gets_faster_drifted():
    # rates 15.2 → 22.0: +44.7 %, the groups apart (rank test p = 1/252): improved, counted
    values = [15.0, 15.2, 15.4, 15.1, 15.3, 22.0, 21.9, 22.1, 22.0, 21.8]
    d = drift(values, higher_is_better=True)
    assert not d.worse and d.improved and d.change_pct is not None and d.change_pct > 40
    # within the threshold or within the spread: not counted
    assert not drift([10.0] * 5 + [10.4] * 5, higher_is_better=True).improved
    assert not drift([10, 14, 9, 13, 10, 14, 10, 13, 9, 14], higher_is_better=True).improved


def test_the_analysis_reads_the_probes_noisy_share():
    # 25 flat requests, each with one NOISY probe sample: CLEAN series, CONTAMINATED run
    recs = [record(i) for i in range(25)]
    probes = [
        ProbeRecord.from_json(
            {"type": "probe", "request_id": i + 1, "noisy": True, "verdict": {"quiet": False}}
        )
        for i in range(25)
    ]
    assert analyze(recs, {200: 198}, required=25).verdict == "clean"
    a = analyze(recs, {200: 198}, probes=probes, required=25)
    assert a.verdict == "contaminated" and "NOISY during 25 of the 25" in a.judgement.reasons[0]
    # one NOISY sample, the only one taken, during one request of 25: not the run's state
    one = analyze(recs, {200: 198}, probes=probes[:1], required=25)
    assert one.verdict == "clean" and one.noisy == (1, 25)


def test_no_level_and_faster_episodes_are_contaminated():
    faster = Episode(16, 25, tuple(range(16, 26)), {"ttft_ms": -23.1}, ("ttft_ms",))
    s = SizeEvidence(
        "200 tok",
        episodes=(faster,),
        baseline_n=15,
        required=15,
        faster=("requests 16–25 (TTFT ms −23 %)",),
    )
    v = judge([s])
    assert v.word == Word.CONTAMINATED
    assert v.reasons == (
        (
            "200 tok: faster than the baseline during requests 16–25 (TTFT ms −23 %): "
            "contention only takes time, so the baseline's level was itself slowed (or the "
            "engine changed state)"
        ),
    )
    none = SizeEvidence("200 tok", episodes=(EPISODE,), baseline_n=30, required=25,
                        unsettled={"TTFT ms": (17, 50)})
    assert judge([none]).reasons == (
        (
            "200 tok: no level of TTFT ms holds half of the requests (the largest holds 17 "
            "of 50): the run has no baseline level"
        ),
    )
    split = SizeEvidence("200 tok", episodes=(EPISODE,), baseline_n=25, required=25,
                         disagree=(10, 50))
    assert "only 10 of 50 requests are at every series' baseline level" in judge(
        [split]).reasons[0]


def test_noisy_requests_inside_an_excluded_episode_leave_the_baseline_clean():
    # issue 25's real-burner run: a burner slowed requests 6–10 (decode 21.9 → 15.3 tok/s,
    # −30 %) and the probes called each of them NOISY; 25 requests outside it. The episode is
    # found, its requests left out of the figures, and so out of the NOISY count: 0 of 25
    # record(index) has id index + 1: request i of the run is record(i - 1), id i
    recs = [record(i - 1, 15.33 if 6 <= i <= 10 else 21.9) for i in range(1, 31)]
    noisy = [
        ProbeRecord.from_json(
            {"type": "probe", "request_id": i, "noisy": True, "verdict": {"quiet": False}})
        for i in range(6, 11)
    ]
    a = analyze(recs, {200: 198}, probes=noisy, required=25)
    assert [e.requests for e in a.sizes[0].episodes.episodes] == ["6–10"]
    assert a.noisy == (0, 25)
    assert a.verdict == "clean after re-measuring"
    assert a.counted_ids == set(range(1, 31)) - set(range(6, 11))
    # three of the 25 baseline requests NOISY too: more than a tenth of the baseline
    worse = noisy + [
        ProbeRecord.from_json(
            {"type": "probe", "request_id": i, "noisy": True, "verdict": {"quiet": False}})
        for i in (20, 21, 22)
    ]
    b = analyze(recs, {200: 198}, probes=worse, required=25)
    assert b.noisy == (3, 25) and b.verdict == "contaminated"
    assert b.judgement.reasons[0] == (
        "the probes found the machine NOISY during 3 of the 25 measured requests outside the "
        "episodes")
