"""`llmtop compare`'s energy line (issue 26) over logs written by hand: the per-request J per
output token of each run are set here, so the ratio, its direction and the wording are
computed beside each assertion."""

from __future__ import annotations

import json
from typing import Any

from llmtop.sessions.analysis.compare.energy import compare_energy
from llmtop.sessions.analysis.compare.logs import compare_logs
from llmtop.sessions.records.schema import EnergyRecord, RunLog
from llmtop.sessions.reports.compare import Comparisons
from llmtop.sessions.reports.formats import render

HEADER = {
    "type": "header",
    "format": 1,
    "kind": "bench",
    "model": "m",
    "engine": "e",
    "options": {"num_predict": 10},
}
LINE = "energy: rapl:package-0 (CPU package 0)"
A_VALUES = [0.9, 0.95, 0.98, 1.02, 1.05, 1.1]  # J / output token, median (0.98 + 1.02) / 2 = 1


def log(
    values: list[float],
    *,
    coarse: bool = False,
    run_j_per_token: float | None = None,
    line: str = LINE,
    readable: bool = True,
) -> RunLog:
    """A bench log of len(values) measured ok requests (TTFT 100 ms each), each with its
    "request" energy record of `values[i]` J/output token."""
    records: list[dict[str, Any]] = [
        EnergyRecord("sources", line=line, readable=readable).to_json()
    ]
    for i, v in enumerate(values, start=1):
        records.append(
            {
                "type": "request",
                "id": i,
                "status": "ok",
                "phase": "measure",
                "index": i - 1,
                "prompt_tokens_target": 64,
                "metrics": {"ttft_ms": 100.0, "e2e_ms": 200.0},
            }
        )
        if readable:
            records.append(
                EnergyRecord(
                    "request",
                    "rapl:cpu",
                    "CPU package 0",
                    request_id=i,
                    output_tokens=10,
                    decode_j=10 * v,
                    output_j_per_token=v,
                    coarse=coarse,
                    reason="too coarse" if coarse else None,
                ).to_json()
            )
    if run_j_per_token is not None:
        records.append(
            EnergyRecord(
                "run",
                "rapl:cpu",
                "CPU package 0",
                output_tokens=60,
                output_j_per_token=run_j_per_token,
            ).to_json()
        )
    return RunLog.from_json(HEADER, records)


def test_b_using_a_fifth_less_energy_per_token_says_so_with_its_interval() -> None:
    # B = 0.8 × A request by request: median(B) / median(A) = 0.8 / 1.0, so B uses
    # 100 × (1 − 0.8) = 20 % less. Every B value (≤ 0.88) is below every A value (≥ 0.9):
    # U = 0 and no ties, so scipy's exact test: two-sided p = 2 / C(12, 6) = 2 / 924 ≈ 0.0022;
    # every bootstrap ratio of medians lies in [0.72 / 1.1, 0.88 / 0.9], below 1: the
    # interval excludes 1.
    a, b = log(A_VALUES), log([0.8 * v for v in A_VALUES])
    (e,) = compare_energy(a, b)
    assert e.source == "rapl:cpu" and (e.n_a, e.n_b) == (6, 6)
    assert e.less_pct is not None and abs(e.less_pct - 20.0) < 1e-9
    assert e.test is not None and abs(e.test.p_value - 2 / 924) < 1e-4
    assert e.less_low is not None and e.less_high is not None
    assert 100 * (1 - 0.88 / 0.9) <= e.less_low <= 20.0 <= e.less_high <= 100 * (1 - 0.72 / 1.1)
    assert e.verdict == (
        f"B uses 20 % less energy per output token (95 % CI {e.less_low:.0f}–{e.less_high:.0f} %)"
    )
    # the same line in compare's markdown and JSON
    c = compare_logs(a, b)
    md = render(Comparisons([c], [a, b], [[e]]), "md")
    assert f"- rapl:cpu: {e.verdict}" in md
    doc = json.loads(render(Comparisons([c], [a, b], [[e]]), "json"))
    assert doc["comparisons"][0]["energy"][0]["less_pct"] == e.less_pct


def test_more_energy_reads_more() -> None:
    # B = 1.25 × A: ratio 1.25, B uses 25 % more
    (e,) = compare_energy(log(A_VALUES), log([1.25 * v for v in A_VALUES]))
    assert e.verdict.startswith("B uses 25 % more energy per output token (95 % CI ")


def test_a_coarse_source_compares_the_runs_figures_without_an_interval() -> None:
    # no per-request figure counts (all coarse): the runs' all-in 1.0 and 0.75 J/token,
    # 100 × (1 − 0.75) = 25 % less, one figure per run
    a = log(A_VALUES, coarse=True, run_j_per_token=1.0)
    b = log(A_VALUES, coarse=True, run_j_per_token=0.75)
    (e,) = compare_energy(a, b)
    assert e.test is None and (e.run_a, e.run_b) == (1.0, 0.75)
    assert e.verdict.startswith(
        "too few per-request figures (A 0, B 0; at least 5 each; "
        "per-request windows too coarse (too coarse)"
    )
    assert e.verdict.endswith(
        ": the runs' all-in figures, 1 → 0.75 J/output token "
        "(B 25 % less; one figure per run: no interval)"
    )


def test_without_a_source_compare_says_na_with_the_reason() -> None:
    na = "energy: n/a — no readable source (RAPL: no /sys/class/powercap)"
    a, b = log(A_VALUES), log(A_VALUES, line=na, readable=False)
    (e,) = compare_energy(a, b)
    assert e.source == "" and e.test is None
    assert e.verdict == f"energy not compared (B: {na})"


def test_two_runs_of_one_machine_without_a_source_say_the_reason_once() -> None:
    # finding O: compare printed the same line for A and for B
    na = "energy: n/a — no readable source (RAPL: no /sys/class/powercap)"
    a, b = log(A_VALUES, line=na, readable=False), log(A_VALUES, line=na, readable=False)
    (e,) = compare_energy(a, b)
    assert e.verdict == f"energy not compared (A and B: {na})"
