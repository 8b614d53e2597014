"""A recorder that keeps what it writes (`SessionRecorder(keep=True)`, a bench's): its
`kept()` is what `read_log` reads from the file so far, record for record, the reader's
skips and warnings included, without reading the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtop.engines.connection import Connection
from llmtop.engines.ollama import OllamaEngine
from llmtop.sessions.records.log import read_log
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.records.schema import CalibrationRecord, EnvironmentRecord, SummaryRecord
from llmtop.sessions.runners.recorder import RequestFields, SessionRecorder
from tests.unit.test_analysis_report import record_json


def recorder(path: Path, keep: bool = True) -> SessionRecorder:
    conn = Connection(OllamaEngine("http://127.0.0.1:9"), "m", None, None)
    return SessionRecorder(conn, {"temperature": 0}, path, kind="bench", keep=keep)


def test_kept_is_the_file_read_back(tmp_path: Path) -> None:
    rec = recorder(tmp_path / "b.jsonl")
    log = rec.log
    log.write(EnvironmentRecord.of({"phase": "start", "loaded": {"size": 3}, "engine": "x"}))
    log.write(CalibrationRecord.of({"targets": {"200": {"words": 105, "tokens": 198}},
                                    "probes": [[1, 27]], "template_tokens": 26}))
    for i in range(3):
        log.write(RequestRecord.from_json(record_json(i)))
    log.write_probe({"t_ns": 5, "wall_time": "t"}, 2)
    # a request whose E2E ends before its TTFT: the reader skips it, naming its line
    log.write(RequestRecord.from_json({**record_json(3), "metrics": {"ttft_ms": 9.0,
                                                                     "e2e_ms": 1.0}}))
    log.write(SummaryRecord(False, 3, 5.0, "clean", []))
    assert rec.kept() == read_log(log.path)
    rec.close()
    kept, read = rec.kept(), read_log(log.path)
    assert kept == read and kept.ended_at is not None
    assert len(kept.requests) == 3 and kept.warnings and kept.warnings == read.warnings
    assert kept.warnings[0].startswith("line 8: ")


def test_a_session_that_keeps_nothing_says_so(tmp_path: Path) -> None:
    rec = recorder(tmp_path / "s.jsonl", keep=False)
    with pytest.raises(ValueError, match="keeps no records"):
        rec.kept()
    rec.close()


def test_request_fields_write_the_set_ones() -> None:
    fields = RequestFields(phase="measure", index=3, prompt_tokens_target=200)
    assert fields.given() == {"phase": "measure", "index": 3, "prompt_tokens_target": 200}
    assert RequestFields().given() == {}
