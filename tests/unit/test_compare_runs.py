"""`compare` over the runs of `bench --runs K` (analysis/compare/runs.py): the runs' spread,
not one run's requests, decides."""

from __future__ import annotations

import json

import pytest

from llmtop import cli
from llmtop.sessions.analysis.compare.logs import compare_logs
from llmtop.sessions.analysis.compare.runs import run_set, runs_ratio_test
from llmtop.sessions.records.log import read_log
from tests.unit.compare_logs import write_log


def a_set(tmp_path, medians, stem="a"):
    """A --runs set: run k's 25 requests all at TTFT medians[k − 1] ms."""
    n = len(medians)
    return [write_log(tmp_path / f"{stem}-run{k}.jsonl", [m] * 25,
                      bench={"requests": 25, "run": k, "runs": n})
            for k, m in enumerate(medians, start=1)]


def test_the_runs_spread_decides_not_one_runs_requests(tmp_path):
    # A: three runs at TTFT 800, 880 and 720 ms (±10 %, as runs on a shared machine); B: one
    # run at 740 ms. Run 1 of A alone against B: 25 equal values a side, B 800 / 740 =
    # 1.08× faster and significant.
    paths = a_set(tmp_path, [800.0, 880.0, 720.0])
    b = write_log(tmp_path / "b.jsonl", [740.0] * 25, bench={"requests": 25})
    la, lb = read_log(paths[0]), read_log(b)
    one = compare_logs(la, lb, metrics=["ttft"])
    assert one.rows[0].verdict.startswith("B is 1.08× faster")
    runs, notes = run_set(str(paths[0]), la)
    assert len(runs) == 3 and notes == []
    c = compare_logs(la, lb, metrics=["ttft"], runs=(runs, [lb]))
    (row,) = c.rows
    t = row.test
    assert t is not None and (t.n_a, t.n_b) == (3, 1)
    # centre of A: median(800, 880, 720) = 800; one-sample t of the three against 740:
    # mean 800, s = 80, t = 60 / (80 / √3) = 1.299 with 2 df → p = 0.323
    assert t.median_a == 800.0 and t.p_value == pytest.approx(0.323, abs=0.002)
    # the drawn runs' median is one of 720, 800, 880: B/A between 740/880 and 740/720
    assert 740 / 880 - 1e-9 <= t.ci_low < 1 < t.ci_high <= 740 / 720 + 1e-9
    assert row.verdict.startswith("no significant difference")
    assert row.verdict.endswith("over 3 / 1 runs")


def test_two_sets_far_apart_differ(tmp_path):
    a = a_set(tmp_path, [800.0, 880.0, 720.0])
    b = a_set(tmp_path, [600.0, 610.0, 590.0], stem="b")
    la, lb = read_log(a[1]), read_log(b[2])
    c = compare_logs(la, lb, metrics=["ttft"],
                     runs=(run_set(str(a[1]), la)[0], run_set(str(b[2]), lb)[0]))
    (row,) = c.rows
    # 800 / 600 = 1.33×; Welch's t on (800, 880, 720) vs (600, 610, 590): t = 4.30, p < 0.05;
    # B/A at most 610 / 720 = 0.85: the interval excludes 1
    assert row.verdict.startswith("B is 1.33× faster") and row.verdict.endswith("3 / 3 runs")
    assert row.test is not None and row.test.ci_high <= 610 / 720 + 1e-9


def test_a_missing_run_is_named_and_the_cli_uses_the_set(tmp_path, capsys):
    paths = a_set(tmp_path, [800.0, 880.0, 720.0])
    paths[2].unlink()
    la = read_log(paths[0])
    runs, notes = run_set(str(paths[0]), la)
    assert len(runs) == 2 and len(notes) == 1 and notes[0].startswith("run 3 of 3 left out")
    b = write_log(tmp_path / "b.jsonl", [740.0] * 25, bench={"requests": 25})
    assert cli.main(["compare", str(paths[0]), str(b), "--metric", "ttft", "--format",
                     "json"]) == 0
    out, err = capsys.readouterr()
    assert "is run 1 of a set of 2" in err and "run 3 of 3 left out" in err
    assert "over 2 / 1 runs" in json.dumps(json.loads(out))
    # a single log that is no set: itself
    single, none = run_set(str(b), read_log(b))
    assert len(single) == 1 and none == []


def test_too_few_values_is_a_clear_error():
    with pytest.raises(ValueError, match="too few runs"):
        runs_ratio_test([[1.0, 2.0]], [[1.0, 2.0, 3.0]])


def test_two_runs_of_one_set_are_compared_themselves(tmp_path, capsys):
    # second new-user pass P14: `compare run1 run2` of one set compared the set with itself
    # (median A = median B, "no significant difference" whatever the runs measured)
    paths = a_set(tmp_path, [800.0, 600.0, 700.0])
    assert cli.main(["compare", str(paths[0]), str(paths[1]), "--metric", "ttft",
                     "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert "are runs of one set: comparing the two runs themselves" in err
    assert "comparing the runs' baselines" not in err  # third pass: it contradicted the above
    (row,) = json.loads(out)["comparisons"][0]["rows"]
    # run 1 all at 800 ms, run 2 all at 600: B/A = 0.75
    assert row["ratio"] == pytest.approx(0.75)
