"""The bench finds slow episodes, re-measures around them and reports the baseline, on a
scripted engine with exact timings (llmtop/testing/paced.py; issue 25).

The engine's clock is virtual (request.perf_counter_ns patched with it), so every TTFT,
E2E and decode rate is exactly the script's, whatever the machine's load. The real probe
sampler still runs, so the verdict is checked on the log's requests without its probe
samples (the NOISY share of a shared test machine is not this test's subject; the rule is
tested in test_verdict.py).
"""

from __future__ import annotations

import asyncio

import pytest

from llmtop.sessions.analysis.compare.runs import run_set
from llmtop.sessions.analysis.run import analyze, calibrated_tokens
from llmtop.sessions.measure.config import BenchConfig
from llmtop.sessions.records.log import read_log
from llmtop.sessions.records.schema import SummaryRecord
from llmtop.sessions.reports.formats import render
from llmtop.sessions.reports.run import build
from llmtop.sessions.runners.bench import BenchRunner
from llmtop.testing.paced import Pace, PacedEngine, episodes, paced_connection, trend

REQUESTS = 25


def bench(tmp_path, monkeypatch, engine: PacedEngine, name: str = "bench.jsonl",
          noisy: tuple[int, int] | None = None, on_progress=None, **config):
    """Run the bench on `engine`; noisy: what the re-measuring step is told of the probes'
    NOISY requests, (NOISY, measured) — by default none, whatever the shared test machine's
    real samples say (the bench stops re-measuring on a NOISY machine)."""
    monkeypatch.setattr("llmtop.sessions.measure.request.perf_counter_ns", engine.clock)
    monkeypatch.setattr("llmtop.sessions.runners.bench.noisy_requests",
                        lambda sizes, _probes: noisy or (0, len(sizes[0].requests)))
    cfg = BenchConfig(
        requests=REQUESTS,
        warmup=1,
        prompt_tokens=(200,),
        max_tokens=50,
        preflight_s=0,
        use_cache=False,
        remeasure_pause_s=0,
        **config,
    )
    runner = BenchRunner(paced_connection(engine), cfg, str(tmp_path / name),
                         on_progress=on_progress)
    outcome = asyncio.run(runner.run())
    log = read_log(outcome.log_path)
    quiet = analyze(
        log.requests, calibrated_tokens(log.calibration), 5.0, log.canaries, required=REQUESTS
    )
    return log, quiet


def unslowed(tokens: float, pace: Pace) -> tuple[float, float]:
    """(TTFT ms, server decode tok/s) of an unslowed reply: load + prefill + overhead, and
    one token per gap."""
    return pace.load_ms + tokens * pace.prefill_ms_per_token + pace.overhead_ms, 1000 / pace.gap_ms


def test_two_known_episodes_are_found_and_re_measured(tmp_path, monkeypatch):
    engine = PacedEngine(factor=episodes((6, 10), (18, 21), slower=1.3))
    log, a = bench(tmp_path, monkeypatch, engine)
    (size,) = a.sizes
    found = size.episodes.episodes
    assert [(e.first, e.last) for e in found] == [(6, 10), (18, 21)]
    # every duration × 1.3: TTFT, prefill and E2E +30 %; decode 100 → 76.9 tok/s, −23.1 %
    for e in found:
        assert e.changes["ttft_ms"] == pytest.approx(30.0, abs=0.1)
        assert e.changes["prompt_eval_ms"] == pytest.approx(30.0, abs=0.1)
        assert e.changes["server_decode_tps"] == pytest.approx((1 / 1.3 - 1) * 100, abs=0.1)
    # 25 − 5 − 4 = 16 outside the episodes: 9 more measured, after the pause
    measured = [r for r in log.requests if r.phase == "measure"]
    assert len(measured) == REQUESTS + 9
    assert len(size.baseline) == REQUESTS
    assert a.verdict == "clean after re-measuring"
    expected = (
        "200 tok: episodes excluded (requests 6–10, requests 18–21); the baseline is the 25 "
        "requests outside them"
    )
    assert a.judgement.reasons == (expected,)
    tokens = log.calibration.targets["200"].tokens
    ttft, decode = unslowed(tokens, Pace())
    assert size.summaries["ttft_ms"].median == pytest.approx(ttft, rel=0.02)
    assert size.summaries["server_decode_tps"].median == pytest.approx(decode, rel=0.02)
    # the log tags every request of an episode (the summary record's request ids)
    summary = next(r for r in log.records if isinstance(r, SummaryRecord))
    tags = [(t["first"], t["last"], len(t["request_ids"])) for t in summary.episodes or []]
    assert tags == [(6, 10, 5), (18, 21, 4)]
    md = render(build(log), "md")
    assert "## Slow episodes" in md and "| 6–10 |" in md and "| 18–21 |" in md
    assert "re-measured 9 requests beyond the protocol's 25" in md


def test_a_noisy_machine_is_not_re_measured(tmp_path, monkeypatch):
    # issue 32, finding M: every request NOISY and still 9 more measured. The probes called
    # 20 of the 25 measured requests NOISY (> half): re-measuring would be as noisy.
    engine = PacedEngine(factor=episodes((6, 10), (18, 21), slower=1.3))
    said: list[str] = []
    log, _ = bench(tmp_path, monkeypatch, engine, noisy=(20, 25),
                   on_progress=lambda p: said.append(p.message))
    assert sum(r.phase == "measure" for r in log.requests) == REQUESTS  # none more
    assert any(m.startswith("not re-measuring: the probes called the machine NOISY during "
                            "20 of 25 requests") for m in said), said


def test_without_re_measuring_the_baseline_is_short(tmp_path, monkeypatch):
    engine = PacedEngine(factor=episodes((6, 10), (18, 21), slower=1.3))
    # run 1 of a --runs 2 set (commands/bench.py names it b-run1.jsonl): its header says so,
    # and compare's run_set looks for run 2 beside it
    log, a = bench(tmp_path, monkeypatch, engine, "b-run1.jsonl", remeasure_budget=0, run=1,
                   runs=2)
    assert log.header.bench is not None
    assert log.header.bench.run == 1 and log.header.bench.runs == 2
    found, notes = run_set(str(tmp_path / "b-run1.jsonl"), log)
    assert found == [log] and notes[0].startswith("run 2 of 2 left out")
    assert sum(r.phase == "measure" for r in log.requests) == REQUESTS
    assert a.verdict == "contaminated"
    assert "only 16 of the 25 requests are outside the episodes" in a.judgement.reasons[0]


def test_a_steady_trend_is_contaminated_not_episodes(tmp_path, monkeypatch):
    engine = PacedEngine(factor=trend(0.01))  # +1 % per measured request, compounding
    log, a = bench(tmp_path, monkeypatch, engine)
    (size,) = a.sizes
    assert size.episodes.episodes == ()
    assert set(size.episodes.trends) >= {"ttft_ms", "server_decode_tps"}
    assert sum(r.phase == "measure" for r in log.requests) == REQUESTS  # nothing to re-measure
    assert a.verdict == "contaminated"
    assert any("is a trend the whole way" in r for r in a.judgement.reasons)


def test_slow_for_its_first_sixty_percent_then_fast(tmp_path, monkeypatch):
    # 1–15 of 25 at +30 %, then unslowed. After 25 the slow level is the majority (15) and
    # 16–25 a faster episode that the run ends in, so the bench re-measures: 10 more (the
    # baseline's shortfall, 25 − 15) make the fast level 20 of 35, the majority; 1–15 are
    # now the (slower) episode and 5 more complete its 25: 15 extra in all, CLEAN AFTER
    # RE-MEASURING at the unslowed service time
    engine = PacedEngine(factor=episodes((1, 15), slower=1.3))
    log, a = bench(tmp_path, monkeypatch, engine)
    (size,) = a.sizes
    assert [(e.first, e.last, e.faster) for e in size.episodes.episodes] == [(1, 15, ())]
    assert sum(r.phase == "measure" for r in log.requests) == REQUESTS + 15
    assert a.verdict == "clean after re-measuring"
    ttft, decode = unslowed(log.calibration.targets["200"].tokens, Pace())
    assert size.summaries["ttft_ms"].median == pytest.approx(ttft, rel=0.02)
    assert size.summaries["server_decode_tps"].median == pytest.approx(decode, rel=0.02)
    # not re-measured: the majority's level is the slowed one and 16–25 ran faster: no
    # baseline to trust (verdict rule 5), and 15 of 25 are outside the episode
    log, a = bench(tmp_path / "off", monkeypatch, PacedEngine(factor=episodes((1, 15),
                   slower=1.3)), remeasure_budget=0)
    assert a.verdict == "contaminated"
    assert any("faster than the baseline during requests 16–25 (TTFT ms -23 %" in r
               for r in a.judgement.reasons)
    assert "| 16–25 (faster) |" in render(build(log), "md")


def test_the_run_reads_no_file_and_analyses_once_per_decision(tmp_path, monkeypatch):
    """The recorder keeps what it wrote: the outcome's log is the file's records exactly
    (`read_log`'s own), the run never reads its file, and its analyses are one a
    re-measuring decision plus one at the end, which the report takes as it is."""
    import llmtop.sessions.runners.bench as bench_module

    analysed = []
    real = bench_module.analyze_run
    monkeypatch.setattr(bench_module, "analyze_run", lambda log: analysed.append(log) or real(log))
    monkeypatch.setattr("llmtop.sessions.records.log.read_log",
                        lambda *_a, **_k: pytest.fail("the bench read its log back"))
    engine = PacedEngine(factor=episodes((6, 10), (18, 21), slower=1.3))
    monkeypatch.setattr("llmtop.sessions.measure.request.perf_counter_ns", engine.clock)
    monkeypatch.setattr(bench_module, "noisy_requests",
                        lambda sizes, _probes: (0, len(sizes[0].requests)))
    cfg = BenchConfig(requests=REQUESTS, warmup=1, prompt_tokens=(200,), max_tokens=50,
                      preflight_s=0, use_cache=False, remeasure_pause_s=0)
    runner = BenchRunner(paced_connection(engine), cfg, str(tmp_path / "b.jsonl"))
    outcome = asyncio.run(runner.run())
    monkeypatch.undo()
    # a decision after the size's 25 requests (9 short), another after the 9: then the end
    assert len(analysed) == 3
    assert outcome.log == read_log(outcome.log_path)
    assert outcome.log.ended_at is not None and outcome.log.summary is not None
    for fmt in ("md", "json", "csv"):
        assert render(build(outcome.log, outcome.analysis), fmt) == render(
            build(read_log(outcome.log_path)), fmt)
