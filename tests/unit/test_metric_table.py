"""The metric table (sessions/measure/metrics.py) is the one place a metric's field name is
typed out: everyone else reads its constants, so that renaming a field or relabelling a
metric is one edit. The scan reads llmtop's source with ast, so a name in a docstring or a
comment does not count, and a name inside an f-string or a dict literal does."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from llmtop.sessions.analysis.load import LevelResult
from llmtop.sessions.analysis.peers import METRICS as PEER_METRICS
from llmtop.sessions.analysis.run import BENCH_METRICS
from llmtop.sessions.measure import metrics
from llmtop.sessions.measure.metrics import (
    COMPARE_METRICS,
    METRICS,
    Carrier,
    carried_by,
)
from llmtop.sessions.measure.timeline import RequestMetrics
from llmtop.sessions.records.request import RequestRecord

PACKAGE = Path(metrics.__file__).resolve().parents[2]
TABLE = Path(metrics.__file__).resolve()


def _literals(source: str, keys: frozenset[str]) -> list[tuple[int, str]]:
    """(line, key) of each string constant in `source` equal to one of `keys`."""
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value in keys]


def test_no_metric_key_is_typed_out_outside_the_table() -> None:
    keys = frozenset(METRICS)
    found = [f"{path.relative_to(PACKAGE.parent)}:{line} {key!r}"
             for path in sorted(PACKAGE.rglob("*.py")) if path.resolve() != TABLE
             for line, key in _literals(path.read_text(encoding="utf-8"), keys)]
    assert found == [], "read the key from sessions/measure/metrics.py: " + ", ".join(found)


def test_the_scan_sees_a_key_in_an_fstring_and_a_dict_not_in_prose() -> None:
    source = 'x = {"ttft_ms": 1}\ny = f"{row.get(\'e2e_ms\')}"\n"""ttft_ms in prose"""\n'
    assert sorted(_literals(source, frozenset(METRICS))) == [(1, "ttft_ms"), (2, "e2e_ms")]


def test_every_key_is_a_field_of_what_carries_it() -> None:
    request = {f.name for f in dataclasses.fields(RequestMetrics)}
    record = {f.name for f in dataclasses.fields(RequestRecord)}
    for metric in METRICS.values():
        if Carrier.REQUEST in metric.carriers:
            assert metric.key in request, metric
        if Carrier.RECORD in metric.carriers:
            assert metric.key in record, metric


def test_names_keys_and_series_are_consistent() -> None:
    assert len({m.name for m in METRICS.values()}) == len(METRICS)  # a name picks one metric
    series = {f.name for f in dataclasses.fields(RequestMetrics) if f.type == "tuple[float, ...]"}
    assert {m.key for m in METRICS.values() if m.series} == series
    for metric in METRICS.values():
        assert metric.unit in ("ms", "tok/s")
        assert metric.higher_is_better == (metric.unit == "tok/s")  # a rate up, a time down


def test_each_view_holds_what_its_carrier_says() -> None:
    assert set(BENCH_METRICS) == set(carried_by(Carrier.BENCH))
    assert set(PEER_METRICS) == set(carried_by(Carrier.PEERS))
    level = {f.name for f in dataclasses.fields(LevelResult)}
    assert {m.name for m in carried_by(Carrier.LOAD)} <= level  # a level's figures, by name
    assert all(Carrier.REQUEST in m.carriers for m in COMPARE_METRICS.values())


def test_labels_as_the_reports_print_them() -> None:
    assert [m.heading for m in BENCH_METRICS] == [
        "TTFT ms", "E2E ms", "prefill ms", "prefill tok/s", "decode (client) tok/s",
        "decode (server) tok/s", "TPOT ms", "overhead ms"]
    assert [(n, m.label) for n, m in COMPARE_METRICS.items()] == [
        ("ttft", "TTFT"), ("tpot", "TPOT"), ("decode", "decode (server)"),
        ("prefill", "prefill (server)"), ("e2e", "E2E")]
