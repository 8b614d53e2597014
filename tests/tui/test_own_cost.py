"""llmtop names itself when it costs more than its budget, as it would any noisy program."""

from llmtop.probes.processes import ProcessSample
from llmtop.tui.widgets.apps_view import SELF_BUDGET_PERCENT, apps_text


def sample(self_cpu: float | None) -> ProcessSample:
    return ProcessSample(apps=(), self_cpu_percent=self_cpu, engine_cpu_percent=None,
                         warming_up=False)


def test_within_budget_is_plain() -> None:
    text = apps_text(sample(SELF_BUDGET_PERCENT)).plain  # at the budget: not over it
    assert "llmtop itself" in text and "budget" not in text


def test_over_budget_says_so() -> None:
    text = apps_text(sample(SELF_BUDGET_PERCENT + 7.0)).plain
    assert "⚠ over its 5 % budget" in text


def test_unknown_own_cpu_is_not_over_budget() -> None:
    assert "budget" not in apps_text(sample(None)).plain
