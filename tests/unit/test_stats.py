"""The source's sample-size rules and drift numbers (docs/method.md, "Statistics", "Drift")."""

import pytest

from llmtop.sessions.measure.stats import drift, percentile, summarize
from llmtop.sessions.reports.text import sparkline

# The source's contaminated run (browser open): per-request generation tok/s, in order.
CONTAMINATED = [21.9, 21.9, 22.0, 22.0, 22.0, 21.0, 21.0, 16.9, 17.8, 17.0, 17.0, 17.5, 18.7,
                21.7, 21.9, 20.3, 21.5, 19.8, 21.4, 16.7, 14.0, 14.8, 16.0, 15.2, 15.6]


def test_source_contaminated_series_drifts_minus_30_9_percent():
    d = drift(CONTAMINATED, higher_is_better=True)
    # first 5: 21.9 21.9 22.0 22.0 22.0 → median 22.0; last 5: 14.0 14.8 16.0 15.2 15.6 → 15.2
    assert d.first_median == 22.0 and d.last_median == 15.2
    # (15.2 − 22.0) / 22.0 = −30.909 %
    assert d.change_pct == pytest.approx(-30.9, abs=0.01)
    assert d.worse


def test_flat_series_is_clean():
    d = drift([21.9] * 25, higher_is_better=True)
    assert d.change_pct == 0.0 and not d.worse


def test_times_worsen_upwards():
    ttft = [800.0] * 5 + [810.0] * 10 + [850.4] * 5  # +6.3 %, like the source's TTFT
    d = drift(ttft, higher_is_better=False)
    assert d.change_pct == pytest.approx(6.3, abs=0.01) and d.worse
    faster = drift(list(reversed(ttft)), higher_is_better=False)
    assert faster.change_pct < 0 and not faster.worse


def test_drift_needs_two_windows():
    d = drift([1.0] * 9, higher_is_better=True)
    assert d.change_pct is None and not d.worse and "at least 10" in d.note


def test_p95_only_with_20_samples():
    s = summarize(CONTAMINATED[:19])
    assert s.n == 19 and s.p95 is None and s.p95_note == "n/a (n < 20)" and s.max == 22.0
    full = summarize(CONTAMINATED)
    # sorted[22.8] with linear interpolation: sorted values 22 and 23 are 22.0 and 22.0
    assert full.n == 25 and full.p95 == 22.0 and full.median == 19.8 and full.min == 14.0


def test_percentile_interpolates():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile(list(range(1, 21)), 95) == pytest.approx(19.05)  # rank 18.05 → 19 + 0.05


def test_summarize_skips_missing_values():
    s = summarize([None, 3.0, float("nan"), 1.0])
    assert (s.n, s.median, s.min, s.max) == (2, 2.0, 1.0, 3.0)
    assert summarize([]).median is None


def test_sparkline():
    assert sparkline([1.0, 2.0, None, 3.0]) == "▁▅ █"
