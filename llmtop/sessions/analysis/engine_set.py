"""Several engines measured together (`llmtop bench --engines`): is it one model on all of
them, and how do they compare, metric by metric?

`match_models`: the model matched across the engines before anything is measured — by the
file where every engine's model file is readable here (size and SHA-256: one GGUF whatever
each engine calls it), else by name; a proven difference refuses the set, names that
differ with nothing to tell them apart are said as a warning (compare's own check,
compare/engines.model_warning, then says what the logs' headers record of each model).

`analyze_set`: from the engines' logs alone (each analysed as its own bench report is:
run.analyze_run), one table per metric of the metric table (`COMPARE_METRICS`: TTFT, TPOT,
decode, prefill, E2E) and prompt size, one row per engine — the baseline's n and median with
its 95 % interval (measure/stats.median_interval: distribution-free, the sign test's order
statistics) — and
compare's verdict for each pair of engines (compare/logs.compare_logs, the engine being the
point: `--vary engine`; configurations that differ stay named in its warnings; a set matched
by file has no pair warning that the models may differ: the file proved them one).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from llmtop.sessions.analysis.compare.engines import engine_settings, model_warning
from llmtop.sessions.analysis.compare.groups import groups
from llmtop.sessions.analysis.compare.logs import Comparison, compare_logs
from llmtop.sessions.analysis.run import analyze_run
from llmtop.sessions.measure.metrics import COMPARE_METRICS, Metric
from llmtop.sessions.measure.stats import median_interval
from llmtop.sessions.records.engine_set import EngineSet, ModelFile
from llmtop.sessions.records.schema import RunLog


@dataclass(frozen=True, slots=True)
class ModelMatch:
    """How the model was matched: how ("file": size and SHA-256 of every engine's model
    file; "name": the engines' names for it; "none": names that differ, nothing read to
    tell), said (the sentence for the user), refused (a proven difference: the set is not
    measured)."""

    how: str
    said: str
    refused: bool = False

    def to_dict(self) -> dict[str, str]:
        """{"how", "said"} as the set's file keeps them."""
        return {"how": self.how, "said": self.said}


def _base(name: str) -> str:
    """A model's name compared across engines: its file's base name without ".gguf" where it
    is a path (llama-cpp-python names a model by its path), lower case."""
    base = os.path.basename(name.replace("\\", "/"))
    return base.removesuffix(".gguf").lower()


def match_models(labels: Sequence[str], names: Sequence[str],
                 files: Sequence[ModelFile | None]) -> ModelMatch:
    """The model matched across the engines (`labels`, their model `names`, their model
    `files` as read here, None where not readable): by file when every engine's is readable
    (one size and SHA-256: matched; else refused, naming each engine's), else by name (the
    same base name: matched; else a warning that names them and what was not readable)."""
    if files and all(f is not None for f in files):
        known = [f for f in files if f is not None]
        if len({(f.size, f.sha256) for f in known}) == 1:
            paths = ", ".join(f"{label}: {f.path}" for label, f in zip(labels, known, strict=True))
            return ModelMatch("file", f"the same model file on every engine: "
                              f"{known[0].size} bytes, sha256 {known[0].sha256[:16]}… "
                              f"({paths})")
        each = "; ".join(f"{label}: {f.path} ({f.size} bytes, sha256 {f.sha256[:16]}…)"
                         for label, f in zip(labels, known, strict=True))
        return ModelMatch("file", f"the engines serve different model files ({each}): "
                          "load the same GGUF in each, or measure them one by one with "
                          "`llmtop bench` and `llmtop compare --vary model`", refused=True)
    unread = [label for label, f in zip(labels, files, strict=False) if f is None]
    why = f"the model file was not readable here for {', '.join(unread)}"
    if len({_base(n) for n in names}) == 1:
        return ModelMatch("name", f"by name only ({names[0]}): {why}")
    each = ", ".join(f"{label}: {n}" for label, n in zip(labels, names, strict=True))
    return ModelMatch("none", f"WARNING: the engines name their models differently ({each}) "
                      f"and {why}, so nothing tells whether it is one model: the figures may "
                      "be of different models (each pair's warnings say what the logs record "
                      "of each)")


@dataclass(frozen=True, slots=True)
class EngineRow:
    """One engine in one metric's table: n (baseline values), median and its 95 % interval
    (low, high: None when n < 6, measure/stats.median_interval; every figure None when
    n == 0)."""

    label: str
    n: int
    median: float | None
    low: float | None
    high: float | None


@dataclass(frozen=True)
class MetricTable:
    """One metric at one prompt size ("64 tok"): a row per engine, in the set's order."""

    metric: Metric
    group: str
    rows: list[EngineRow]


@dataclass(frozen=True)
class SetSide:
    """One engine as the report shows it: its set entry's label, kind, url, version and
    model, the log's path, the engine configuration its header records (compare/engines
    .engine_settings: "threads" → "2", …) and its run's verdict label."""

    label: str
    kind: str
    url: str
    version: str | None
    model: str
    log: str
    settings: dict[str, str]
    verdict: str


@dataclass(frozen=True)
class SetAnalysis:
    """The set's one comparison: engines, the model match, the rounds (each round's
    order), the tables, each pair's Comparison (A: the earlier engine in the set's order)
    and the set's notes."""

    engines: list[SetSide]
    match: dict[str, str]
    rounds: list[dict[str, Any]]
    tables: list[MetricTable]
    pairs: list[Comparison]
    notes: list[str] = field(default_factory=list)


def _row(label: str, values: Sequence[float]) -> EngineRow:
    if not values:
        return EngineRow(label, 0, None, None, None)
    xs = sorted(values)
    mid = len(xs) // 2
    median = xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
    interval = median_interval(xs)
    return EngineRow(label, len(xs), median, *(interval or (None, None)))


def metric_tables(labels: Sequence[str], logs: Sequence[RunLog]) -> list[MetricTable]:
    """One table per metric (COMPARE_METRICS' order) and prompt size (the first log's sizes,
    in its order), a row per engine (an engine without the size: n 0)."""
    specs = list(COMPARE_METRICS.values())
    keys = [m.key for m in specs]
    per_engine = [{g.label: g for g in groups(analyze_run(log), keys)} for log in logs]
    sizes = list(per_engine[0]) if per_engine else []
    tables = []
    for metric in specs:
        for size in sizes:
            rows = [_row(label, found[size].values[metric.key] if size in found else [])
                    for label, found in zip(labels, per_engine, strict=True)]
            tables.append(MetricTable(metric, size, rows))
    return tables


def _same_file(pair: Comparison, a: RunLog, b: RunLog, match: dict[str, str]) -> Comparison:
    """`pair` without compare's model warning (compare/engines.model_warning: names that
    differ, fields one log records and the other not) where the set matched the model by
    its file: one size and SHA-256 on every engine is the same model, whatever each engine
    calls it or records of it, so a pair must not warn that the models may differ (a set
    whose files differ is refused before it is measured, so "file" in its file is a
    match)."""
    said = model_warning(a.header, b.header)
    if match.get("how") != "file" or said is None:
        return pair
    kept = [w for w in pair.checks.warnings if w != said]
    return replace(pair, checks=replace(pair.checks, warnings=kept))


def analyze_set(engine_set: EngineSet, logs: Sequence[RunLog], seed: int = 0) -> SetAnalysis:
    """The set's comparison from its file and its engines' logs (in the set's order)."""
    labels = [e.label for e in engine_set.engines]
    sides = [SetSide(e.label, e.kind, e.url, e.version, e.model, str(engine_set.log_path(e)),
                     engine_settings(log.header), analyze_run(log).judgement.label)
             for e, log in zip(engine_set.engines, logs, strict=True)]
    pairs = [_same_file(compare_logs(logs[i], logs[j], (labels[i], labels[j]),
                                     vary=("engine",), seed=seed), logs[i], logs[j],
                        engine_set.match)
             for i, j in itertools.combinations(range(len(logs)), 2)]
    return SetAnalysis(sides, engine_set.match, engine_set.rounds,
                       metric_tables(labels, logs), pairs, list(engine_set.notes))
