"""The in-TUI report's terminal layout (issue 32, row 13): wide tables become a bullet per row,
narrow ones and the text stay as they are."""

from __future__ import annotations

from llmtop.sessions.reports.run_environment import gpu_absent
from llmtop.tui.state.report_layout import cells, terminal_markdown

REPORT = """# report

**Verdict: CLEAN** — text.

| prompt | n | TTFT p50 / p95 | GPU util % |
|---|---|---|---|
| 200 | 25 | 40.1 / n/a (n < 20) ms | n/a (no GPU) |
| a \\| b | 3 |  | 7 |

| item | value |
|---|---|
| GPU | none |
"""


def test_a_wide_table_becomes_one_bullet_per_row() -> None:
    assert (
        terminal_markdown(REPORT)
        == """# report

**Verdict: CLEAN** — text.

- **200** — n 25 · TTFT p50 / p95 40.1 / n/a (n < 20) ms · GPU util % n/a (no GPU)
- **a \\| b** — n 3 · GPU util % 7

| item | value |
|---|---|
| GPU | none |
"""
    )


def test_cells_keep_an_escaped_bar() -> None:
    assert cells("| a \\| b | c |") == ["a \\| b", "c"]
    assert cells("|x|") == ["x"]


def test_a_machine_without_nvidia_driver_reads_gpu_none() -> None:
    """The probe's reason when NVML's library is missing (tests/unit/test_probes_gpu.py) is
    "none" in a report; a driver that is there but refuses keeps its reason."""
    assert gpu_absent("NVML unavailable: NVML Shared Library Not Found") == "none"  # old logs
    assert gpu_absent("no NVIDIA driver (NVML's library is not on this machine)") == "none"
    assert gpu_absent("NVML unavailable: Insufficient Permissions") == (
        "NVML unavailable: Insufficient Permissions"
    )
    assert gpu_absent(None) == "not checked"
