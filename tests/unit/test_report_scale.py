"""`report` stays linear in the requests (analysis/episodes.py, "Long series: blocks"): the
change-point search sees at most EXACT_POINTS values, and the episodes it finds in a long
series still end on the requests themselves. Timings are bench/report_scale.py's; here the
work and the answers are checked, never a duration."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import ruptures as rpt

from llmtop.sessions.analysis.episodes import EXACT_POINTS, shape_of
from llmtop.sessions.records.log import read_log
from llmtop.sessions.reports.formats import render
from llmtop.sessions.reports.run import build

ROOT = Path(__file__).resolve().parents[2]


def report_scale():
    """bench/report_scale.py as a module (bench/ is a folder of scripts, not a package)."""
    spec = importlib.util.spec_from_file_location("report_scale", ROOT / "bench/report_scale.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_long_series_is_searched_in_blocks_and_its_episode_ends_on_the_requests(monkeypatch):
    seen: list[int] = []
    fit = rpt.KernelCPD.fit

    def counting_fit(self, signal):  # a spy: the search itself runs unchanged
        seen.append(len(signal))
        return fit(self, signal)

    monkeypatch.setattr(rpt.KernelCPD, "fit", counting_fit)
    # 100,000 times with 1 % log-normal noise (seed 44); positions 50,003–52,002 at 1.5 ×;
    # a 3 × spike every 997th. Blocks of 50: the episode starts 3 requests into block 1000
    # and ends 3 into block 1040, so the blocks' change points are a few requests off; the
    # episode is cut back and grown to exactly its 2,000 requests (1 % noise never puts a
    # baseline request beyond 3 σ = 3 %, nor an episode one under 1.5 × e^(−0.03 × 5))
    rng = np.random.default_rng(44)
    x = 100 * np.exp(0.01 * rng.standard_normal(100_000))
    x[50_003:52_003] *= 1.5
    spikes = set(range(996, 100_000, 997))
    x[sorted(spikes)] *= 3
    s = shape_of(list(x), higher_is_better=False)
    assert seen == [EXACT_POINTS]  # 2,000 block means, not 100,000 values
    assert [(sp.start, sp.stop) for sp in s.spans] == [(50_003, 52_003)]
    assert s.spans[0].change_pct == pytest.approx(50.0, abs=0.5)  # 1.5 × the baseline
    assert set(s.outliers) <= spikes  # a spike is an outlier or nothing, never an episode
    assert s.held == 100_000 - 2_000


def test_short_episodes_in_a_long_noisy_series_are_found_whole():
    # 100,000 times at 5 % noise (seed 44) with three 20-request episodes at 1.5 ×: one in a
    # block of 50 (2,500–2,519: the block's median is the baseline's, its mean +20 %), one
    # over two blocks (50,040–50,059: 10 in each, each mean +10 %) and one at 77,777. Each is
    # found whole: the search sets their blocks apart and the episode rule keeps the 20 off
    # requests (1.5 × e^(0.05 z) is beyond 3 σ = 15 % for z > −5.3; a baseline neighbour
    # beyond it needs z > 2.8, which none of these six is)
    rng = np.random.default_rng(44)
    x = 100 * np.exp(0.05 * rng.standard_normal(100_000))
    for start in (2_500, 50_040, 77_777):
        x[start:start + 20] *= 1.5
    s = shape_of(list(x), higher_is_better=False)
    assert [(sp.start, sp.stop) for sp in s.spans] == [(2_500, 2_520), (50_040, 50_060),
                                                       (77_777, 77_797)]
    assert all(sp.change_pct == pytest.approx(50.0, abs=5.0) for sp in s.spans)


def test_up_to_exact_points_the_search_is_request_by_request(monkeypatch):
    seen: list[int] = []
    fit = rpt.KernelCPD.fit
    monkeypatch.setattr(rpt.KernelCPD, "fit",
                        lambda self, signal: seen.append(len(signal)) or fit(self, signal))
    times = [130.0 if 1000 <= i < 1004 else 100.0 for i in range(EXACT_POINTS)]
    s = shape_of(times, higher_is_better=False)
    assert seen == [EXACT_POINTS]
    assert [(sp.start, sp.stop) for sp in s.spans] == [(1000, 1004)]  # 4 requests, exact


def test_the_report_of_a_long_log_names_its_episode_and_not_its_spikes(tmp_path):
    # 3,000 requests made from a real bench record (bench/report_scale.py) with 1 % noise:
    # the episode is requests 2,501–2,520 at 1.5 × (positions 2,500–2,519); the spikes at
    # 997, 1,994 and 2,991 (3 ×) are outliers, not episodes
    module = report_scale()
    path = module.write_log(tmp_path / "long.jsonl", 3000, tmp_path, noise=0.01)
    log = read_log(path)
    report = build(log)
    (size,) = report.analysis.sizes
    assert [(e.first, e.last) for e in size.episodes.episodes] == [(2501, 2520)]
    assert len(size.baseline) == 3000 - 20
    for key, numbers in size.episodes.outliers.items():
        assert set(numbers) <= {997, 1994, 2991}, key
    md = render(report, "md")
    assert "| 2501–2520 |" in md


def test_a_long_series_sparkline_is_binned():
    from llmtop.sessions.reports.run_markdown import SPARK_CELLS, _series_cell

    # 500 values, 250 at 1.0 then 250 at 2.0: b = ⌈500 / 200⌉ = 3, 167 cells; cells 0–82
    # hold requests 0–248 (all 1.0), cell 83 holds 249–251 (1, 2, 2: median 2)
    cell = _series_cell([1.0] * 250 + [2.0] * 250)
    assert cell == "`" + "▁" * 83 + "█" * 84 + "` (medians of 3 requests a cell)"
    assert len(_series_cell([1.0, 2.0] * (SPARK_CELLS // 2))) == SPARK_CELLS + 2  # unbinned
