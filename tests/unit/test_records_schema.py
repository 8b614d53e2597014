"""Every record type of the session log is written through the schema and read back typed."""

from __future__ import annotations

import json

from llmtop.engines.events import ServerStats, Status
from llmtop.sessions.measure.config import LoadConfig
from llmtop.sessions.measure.request import RequestResult
from llmtop.sessions.measure.timeline import RequestMetrics
from llmtop.sessions.records.log import SessionLog, read_log
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.records.schema import (
    RECORD_TYPES,
    BenchMarkRecord,
    CalibrationRecord,
    CanaryRecord,
    EndRecord,
    EnergyRecord,
    EngineStateRecord,
    EnvironmentRecord,
    Header,
    InterruptedRecord,
    LevelRecord,
    PreflightRecord,
    ProbeSourceRecord,
    SummaryRecord,
    UnknownRecord,
    decode,
)

CALIBRATION = {"calibration_format": 1, "engine_host": "h", "model": "m", "options_key": "k",
               "template_tokens": 9, "targets": {"200": {"words": 150, "tokens": 201}},
               "probes": [[100, 140], [200, 270]], "from_cache": True}
FINDING = {"code": "app-busy", "level": "warn", "value": 42.5, "threshold": 20.0, "unit": "%",
           "message": "chromium is busy", "remedy": "close it"}


def result() -> RequestResult:
    return RequestResult(
        request_id=3, wall_start="2026-12-01T10:00:00+00:00", model="m", prompt="hi",
        options={"seed": 42}, sent_ns=1_000, events=(), stats=ServerStats(eval_count=7),
        status=Status.OK, failure=None, metrics=RequestMetrics(ttft_ms=12.5, output_tokens=7),
        prep_ns=2_000_000,
    )


def write_every_type(path) -> SessionLog:
    log = SessionLog(path, {"kind": "load", "engine": "embedded", "model": "m",
                            "load": {"mode": "rate"}, "generator": "locust"})
    log.write(RequestRecord.of(result(), phase="measure", level=1, lag_ms=0.5,
                               sent_offset_ns=10, client="box:1"))
    log.write_probe({"t_ns": 5, "verdict": {"quiet": False, "findings": [FINDING]},
                     "system": {"cpu": 1}}, 3, level=1, request_ids=[3, 4])
    log.write(CanaryRecord.from_json({"cpu_ms": 1.5, "mem_ms": 2.0, "before_request": 4}))
    log.write(CalibrationRecord.of(CALIBRATION))
    log.write(EnvironmentRecord.of({"phase": "start", "engine": "embedded",
                                    "loaded": {"size": 10}}))
    log.write(PreflightRecord.of({"verdict": "NOISY", "quiet": False, "findings": [FINDING],
                                  "samples": 6}))
    log.write(SummaryRecord(contaminated=False, ok_requests=25, drift_threshold_pct=10.0))
    log.write(InterruptedRecord(at="2026-12-01T10:00:05+00:00"))
    log.write(LevelRecord("start", 1, 2.0, mode="rate", requests=8))
    log.write(LevelRecord("end", 1, 2.0, wall_ns=4_000, generator_cpu_ns=400, max_in_flight=3))
    log.write(ProbeSourceRecord("lost", "agent at http://a:1 gone"))
    log.write(BenchMarkRecord("end", "/tmp/bench.jsonl", outcome="QUIET"))
    log.write(EnergyRecord("request", "rapl:cpu", "CPU package 0", request_id=3, energy_j=1.5,
                           prefill_j=0.5, decode_j=1.0, output_tokens=7,
                           output_j_per_token=1.0 / 7, coarse=True, reason="too coarse"))
    log.write(EngineStateRecord.of({"kind": "llama-server", "url": "http://127.0.0.1:8080",
                                    "processing": 1.0, "kv_pct": 1.9, "request_id": 3,
                                    "slots": [{"id": 0, "processing": True, "tokens": 38}]}))
    return log


def test_every_record_type_round_trips_typed(tmp_path):
    path = tmp_path / "every.jsonl"
    write_every_type(path).close()
    log = read_log(path)
    assert log.warnings == ()
    written = {json.loads(line)["type"] for line in path.read_text().splitlines()}
    assert written == set(RECORD_TYPES)  # the test covers every type the schema knows

    h = log.header
    assert (h.kind, h.engine, h.load, h.generator, h.format) == (
        "load", "embedded", LoadConfig(mode="rate"), "locust", 1)
    (r,) = log.requests
    assert (r.id, r.status, r.prompt, r.phase, r.load.level, r.load.lag_ms, r.load.client) == (
        3, Status.OK, "hi", "measure", 1, 0.5, "box:1")
    assert r.metrics.ttft_ms == 12.5 and r.stats == ServerStats(eval_count=7)
    assert r.client_prep_ms == 2.0 and r.load.sent_offset_ns == 10
    (p,) = log.probes
    assert (p.request_id, p.level, p.request_ids, p.t_ns, p.noisy) == (3, 1, (3, 4), 5, True)
    assert p.verdict is not None and p.verdict.findings[0].code == "app-busy"
    assert p.body["system"] == {"cpu": 1}  # an open record keeps its whole body
    (c,) = log.canaries
    assert (c.cpu_ms, c.mem_ms, c.before_request, c.total_ms) == (1.5, 2.0, 4, 3.5)
    cal = log.calibration
    assert cal is not None and cal.targets["200"].words == 150 and cal.probes[1] == (200, 270)
    assert cal.from_cache and cal.template_tokens == 9
    env = log.environment("start")
    assert env is not None and env.loaded == {"size": 10} and env.body["engine"] == "embedded"
    pf = log.preflight
    assert pf is not None and (pf.verdict, pf.quiet, pf.body["samples"]) == ("NOISY", False, 6)
    assert pf.problems[0].value == 42.5 and pf.problems[0].remedy == "close it"
    assert log.summary == SummaryRecord(False, 25, 10.0)
    assert log.interrupted
    start, end = log.of_type(LevelRecord)
    assert (start.phase, start.level, start.mode, start.requests) == ("start", 1, "rate", 8)
    assert (end.wall_ns, end.generator_cpu_ns, end.max_in_flight) == (4_000, 400, 3)
    assert log.first(ProbeSourceRecord) == ProbeSourceRecord("lost", "agent at http://a:1 gone")
    assert log.first(BenchMarkRecord) == BenchMarkRecord("end", "/tmp/bench.jsonl", outcome="QUIET")
    (e,) = log.energy
    assert (e.scope, e.source, e.request_id, e.energy_j, e.output_tokens, e.coarse) == (
        "request", "rapl:cpu", 3, 1.5, 7, True)
    assert e.output_j_per_token == 1.0 / 7 and e.prompt_j_per_token is None
    state = log.first(EngineStateRecord)
    assert state is not None and (state.kind, state.processing, state.kv_pct,
                                  state.request_id) == ("llama-server", 1.0, 1.9, 3)
    assert state.tokens_per_s is None and state.body["slots"][0]["tokens"] == 38
    assert log.ended_at is not None and log.first(EndRecord) is not None


def test_each_record_is_what_it_writes():
    for record in (SummaryRecord(True, 3, 5.0), LevelRecord("end", 0, 1.0, wall_ns=7),
                   EnvironmentRecord.of({"phase": "end", "x": [1]}),
                   CalibrationRecord.of(CALIBRATION)):
        assert decode(json.dumps(record.to_json())) == record
    assert Header.from_json({"format": 1}).to_json()["type"] == "header"


def test_an_unknown_type_is_kept_as_written():
    record = decode({"type": "from-the-future", "x": 1})
    assert record == UnknownRecord("from-the-future", {"x": 1})
    assert record.to_json() == {"type": "from-the-future", "x": 1}
