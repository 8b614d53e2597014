"""The plots screen's axes (issue 32, row 9), by hand."""

from __future__ import annotations

import pytest

from llmtop.tui.screens.plots import plot_title
from llmtop.tui.state.plot_axes import histogram, integer_ticks, off_scale, padded_range


def test_padding_keeps_points_off_the_frame() -> None:
    # requests 1..13: span 12, 8 % of it = 0.96 each side
    assert padded_range([1.0, 13.0]) == pytest.approx((0.04, 13.96))
    # one value: ±8 % of it; a time never below 0
    assert padded_range([50.0]) == pytest.approx((46.0, 54.0))
    assert padded_range([1.0, 100.0], floor=0.0)[0] == 0.0
    # a value under the floor (a negative overhead) keeps its padding: lo < hi always
    assert padded_range([-10.0], floor=0.0) == pytest.approx((-10.8, -9.2))
    with pytest.raises(ValueError, match="at least one"):
        padded_range([])


def test_ticks_are_whole_numbers() -> None:
    assert integer_ticks(0.04, 13.96) == [2, 4, 6, 8, 10, 12]  # 13 ones > 8: every 2nd
    assert integer_ticks(0.92, 2.08) == [1, 2]  # two requests: 1 and 2, never 1.25
    assert integer_ticks(0, 117) == [0, 20, 40, 60, 80, 100]  # counts up to 117
    assert integer_ticks(0.2, 0.8) == []


def test_histogram_starts_at_zero() -> None:
    # gaps 10, 20, 30 and one stall of 300 ms in 3 bins of 100 ms from 0
    assert histogram([10.0, 20.0, 30.0, 300.0], 3) == ([0.0, 100.0, 200.0], [3, 0, 1], 100.0)


def test_ttft_histogram_spans_its_values() -> None:
    # TTFT 400..410 ms in 2 bins from its smallest value: 400–405 and 405–410
    assert histogram([400.0, 401.0, 410.0], 2, None) == ([400.0, 405.0], [2, 1], 5.0)


def test_a_point_far_from_the_ok_requests_is_off_the_scale() -> None:
    ok = [20.0, 22.0, 25.0]
    # a 1.6 s cold start over requests of 20-25 ms: beyond 2 × 25 = 50
    assert off_scale(1600.0, ok) and off_scale(50.1, ok) and not off_scale(50.0, ok)
    # below half the smallest (10 ms) too; nothing is off a scale with no ok requests
    assert off_scale(9.9, ok) and not off_scale(10.0, ok) and not off_scale(1600.0, [])


def test_the_title_carries_the_legend_and_the_points_left_off() -> None:
    assert plot_title("TTFT ms", ["ok", "excluded"], ["#1 1600"]) == (
        "TTFT ms · ● ok  x excluded · off scale: #1 1600"  # 46 cells: fits a 58-wide plot
    )
    assert plot_title("decode tok/s", [], []) == "decode tok/s"


def test_a_narrow_plot_keeps_its_name_and_what_is_off_its_scale() -> None:
    # new-user pass N27: at 80x24 plotext dropped the TTFT plot's whole title (wider than the
    # plot): its name and its off-scale note were gone
    full = "TTFT ms · ● ok  x excluded · off scale: #1 761"  # 46 cells
    assert plot_title("TTFT ms", ["ok", "excluded"], ["#1 761"], 46) == full
    assert plot_title("TTFT ms", ["ok", "excluded"], ["#1 761"], 45) == (
        "TTFT ms · ● ok  x excluded · off: #1 761")  # 40 cells
    assert plot_title("TTFT ms", ["ok", "excluded"], ["#1 761"], 36) == (
        "TTFT ms · off: #1 761")  # 21 cells: the legend went first
    assert plot_title("TTFT ms", ["ok", "excluded"], ["#1 761"], 12) == "TTFT ms"


def test_y_ticks_are_evenly_spaced_round_numbers() -> None:
    from llmtop.tui.state.plot_axes import nice_ticks, tick_label

    # new-user pass D5: plotext labelled 56.7-171.9 as 171.9, 152.7, 114.3, 95.1, 56.7; a
    # step of 20 gives 6 ticks (10 would give 11, over the 6 allowed)
    assert nice_ticks(56.7, 171.9) == [60, 80, 100, 120, 140, 160]
    assert nice_ticks(399.1, 411.9) == [400, 402, 404, 406, 408, 410]
    assert nice_ticks(0.1, 0.13) == [0.1, 0.11, 0.12, 0.13]  # step 0.01
    assert nice_ticks(5.0, 5.0) == [] and nice_ticks(6.0, 5.0) == []
    assert [tick_label(v) for v in (150.0, 0.5, 2.25)] == ["150", "0.5", "2.25"]
