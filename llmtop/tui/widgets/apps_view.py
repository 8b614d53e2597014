"""The busiest apps by CPU (browsers marked), with llmtop's own and the engine's CPU apart."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from llmtop.probes.catalogue import Category
from llmtop.tui.state import fmt

if TYPE_CHECKING:  # the process probe imports psutil: it loads after the first frame
    from llmtop.probes.processes import ProcessSample

TOP_N = 5  # apps listed in a panel of ordinary height; a taller one lists up to MAX_APPS
MAX_APPS = 20  # the apps a probe record keeps (`ProbeSample.to_dict`)
BROWSER_MARK = "🌐"
NAME_WIDTH = 17
CPU_WIDTH = 11  # "CPU" and each app's % of one core end in the same column
RSS_WIDTH = 10
LABEL_WIDTH = 2 + NAME_WIDTH  # the browser mark's two cells, then the name
# llmtop's own budget, % of one core: the "monitor cost" targets (≤ 5 % streaming,
# docs/performance.md); above it llmtop is named as the noisy program it then is.
SELF_BUDGET_PERCENT = 5.0
IDLE_BELOW_PERCENT = 0.05  # shown as "0.0 %": drawn dim
ENGINE_UNKNOWN = "n/a (not identified)"  # connected, but no process of the engine was found
ENGINE_STARTING = "starting…"  # not connected yet: the engine (or the embedded one) starts


def app_name(app: str, n_procs: int, width: int = NAME_WIDTH) -> str:
    """The app's name with its process count ("bash ×7"), cut to `width` cells with "…" in
    the name, never in the count ("kernel thre… ×40", not "kernel threads ×…")."""
    count = "" if n_procs == 1 else f" ×{n_procs}"
    room = max(1, width - len(count))
    name = app if len(app) <= room else app[: room - 1] + "…"
    return name + count


def apps_text(
    processes: ProcessSample | None,
    cost_ms: float | None = None,
    stale_s: float | None = None,
    top_n: int = TOP_N,
    budget_warning: bool = True,
    engine_unknown: str = ENGINE_UNKNOWN,
) -> Text:
    """The `top_n` busiest apps (CPU % of one core, RSS), then "llmtop itself" and the engine.

    `budget_warning`: mark llmtop's own CPU over SELF_BUDGET_PERCENT (False during its own
    start-up, see `ProbePanel`); `engine_unknown`: what the engine line says when the sample
    has no engine CPU (ENGINE_STARTING while connecting).

    A None CPU reading is "warming up" (psutil needs two readings), never 0.0. `stale_s`: the
    processes come from an earlier sample, this many seconds old (the last read gave up);
    a "stale" line says so above them.
    """
    if processes is None:
        return Text("process probe failed (see the verdict)", style="red")
    text = Text()
    if stale_s is not None:
        text.append(f"stale: process data from {stale_s:.1f} s ago\n", style="bold yellow")
    cpu_head = "CPU% of 1 core"  # wider than the column: it ends where the figures end
    text.append(f"{'top apps':<{LABEL_WIDTH + CPU_WIDTH - len(cpu_head)}}{cpu_head}"
                f"{'RSS':>{RSS_WIDTH}}", style="bold underline")
    others = [a for a in processes.apps if a.category not in (Category.SELF, Category.ENGINE)]
    for app in others[:top_n]:
        mark = BROWSER_MARK if app.is_browser else "  "
        cpu = fmt.pct(app.cpu_percent)
        # an idle app (0.0 %: listed for its memory) is dim, so the busy ones stand out
        # (sleep, kthreadd and binary_backend at 0.0 % filled the list)
        idle = app.cpu_percent is not None and app.cpu_percent < IDLE_BELOW_PERCENT
        text.append(f"\n{mark}{app_name(app.app, app.n_procs):<{NAME_WIDTH}}",
                    style="dim" if idle else "")
        text.append(f"{cpu:>{CPU_WIDTH}}",
                    style="dim italic" if app.cpu_percent is None else "dim" if idle else "bold")
        text.append(f"{fmt.size(app.rss_bytes):>{RSS_WIDTH}}", style="dim")
    if not others:
        text.append("\n(none)", style="dim")
    own = processes.self_cpu_percent
    over = budget_warning and own is not None and own > SELF_BUDGET_PERCENT
    text.append(f"\n{'llmtop itself:':<{LABEL_WIDTH}}")
    text.append(f"{fmt.pct(own):>{CPU_WIDTH}}", style="bold yellow" if over else "bold")
    if over:
        text.append(f" ⚠ over its {SELF_BUDGET_PERCENT:g} % budget", style="yellow")
    text.append(f"\n{'engine:':<{LABEL_WIDTH}}")
    if processes.engine_cpu_percent is None:
        text.append(f"{engine_unknown:>{CPU_WIDTH}}", style="dim")
    else:
        text.append(f"{fmt.pct(processes.engine_cpu_percent):>{CPU_WIDTH}}", style="bold")
    if cost_ms is not None:
        text.append(f"\nprobe cost {cost_ms:.1f} ms CPU per sample", style="dim")
    return text
