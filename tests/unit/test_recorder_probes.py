"""The session log's probe samples thin out while a session idles (issue 32 row 19): every
sample while a request runs and for IDLE_AFTER_NS after; idle, one per IDLE_PROBE_PERIOD_NS
and every change of the verdict."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from llmtop.engines.connection import Connection
from llmtop.engines.ollama import OllamaEngine
from llmtop.probes.sampler import ProbeSample
from llmtop.probes.verdict import Finding, Level, Verdict
from llmtop.sessions.runners import recorder as rec
from llmtop.sessions.runners.recorder import SessionRecorder

S = 10**9


def sample(t_ns: int, noisy: bool = False) -> ProbeSample:
    findings = (Finding("browser-busy", Level.WARN, 30.0, 10.0, "%", "a browser", "close it"),
                ) if noisy else ()
    return ProbeSample(t_ns, "2026-12-02T00:00:00+00:00", None, None, None,
                       Verdict.of(findings), 1.0)


def logged_times(path: Path) -> list[int]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [r["t_ns"] for r in lines if r["type"] == "probe"]


def test_idle_samples_thin_to_one_per_period_and_keep_every_verdict_change(
        tmp_path: Path) -> None:
    engine = OllamaEngine("http://127.0.0.1:9")
    conn = Connection(engine, "m", None, None)
    log = tmp_path / "s.jsonl"
    recorder = SessionRecorder(conn, {}, log)
    t0 = recorder.active_ns
    assert rec.IDLE_AFTER_NS == 5 * S and rec.IDLE_PROBE_PERIOD_NS == 10 * S
    # 1 Hz samples from t0+1 s to t0+30 s, all quiet except t0+17 s and t0+18 s (noisy).
    for k in range(1, 31):
        recorder.record_probe(sample(t0 + k * S, noisy=k in (17, 18)))
    recorder.close()
    asyncio.run(engine.aclose())
    # By hand: 1..5 s are within IDLE_AFTER_NS of the start (all kept); 6 s is idle, but the
    # last kept (5 s) is 1 s old: dropped ... until 15 s (10 s after 5 s): kept. 16 s dropped;
    # 17 s is a new verdict (noisy): kept; 18 s same verdict, 1 s later: dropped; 19 s quiet
    # again: kept; next one 10 s after 19 s: 29 s. 30 s dropped.
    assert [(t - t0) // S for t in logged_times(log)] == [1, 2, 3, 4, 5, 15, 17, 19, 29]
    assert recorder.probes_thinned == 30 - 9


def test_every_sample_is_kept_while_a_request_runs(tmp_path: Path) -> None:
    engine = OllamaEngine("http://127.0.0.1:9")
    log = tmp_path / "s.jsonl"
    recorder = SessionRecorder(Connection(engine, "m", None, None), {}, log)
    recorder.new_request("hi")  # in flight from here on
    t0 = recorder.active_ns
    for k in range(1, 21):
        recorder.record_probe(sample(t0 + k * S))
    recorder.close()
    asyncio.run(engine.aclose())
    assert len(logged_times(log)) == 20 and recorder.probes_thinned == 0
