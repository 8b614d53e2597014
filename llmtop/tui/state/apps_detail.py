"""The apps screen's content (F3), as plain functions over a probe sample: every app of the
sample with its CPU, memory and processes, and one app's processes in detail (its pids
and command lines, within the privacy rules). The program of a
process is named as the probe names it (`processes.interpreted_program`): a script's or
module's name, a one-liner's tag, never an argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rich.text import Text

from llmtop.probes.catalogue import Category
from llmtop.probes.processes import AppUsage, PidDetail, ProcessSample
from llmtop.tui.state import fmt

# the figures before the kind, whose words are the longest cells: at 80 columns it is the kind
# the box cuts, not the RSS (an RSS cut to "212.4 Mi" read as another unit)
APP_COLUMNS = ("app", "CPU% of 1 core", "RSS", "processes", "kind")
ROLE = {Category.SELF: "llmtop itself", Category.ENGINE: "the measured engine"}


def app_rows(processes: ProcessSample | None) -> list[tuple[str, str, str, str, str]]:
    """One row per app, busiest first (the sample's order), in APP_COLUMNS order; llmtop's
    own process and the measured engine are said as such in the kind column."""
    if processes is None:
        return []
    return [(app.app, fmt.pct(app.cpu_percent), fmt.size(app.rss_bytes), str(app.n_procs),
             ROLE.get(app.category, app.category.value)) for app in processes.apps]


def detail_text(app: AppUsage, details: Sequence[PidDetail]) -> Text:
    """The app's processes: "pid 4242  python3 -c …#4eda  user alice  4 threads  since
    10:02:03", one line each; a process that exited says so; more pids than shown are
    counted."""
    text = Text.assemble((app.app, "bold"), f" — {app.n_procs} process"
                         f"{'es' if app.n_procs != 1 else ''}, {fmt.pct(app.cpu_percent)} CPU")
    for d in details:
        text.append(f"\npid {d.pid:<8}")
        if d.gone:
            text.append("exited since the sample", style="dim")
            continue
        text.append(d.program, style="bold")
        if d.user:
            text.append(f"  user {d.user}")
        if d.threads is not None:
            text.append(f"  {d.threads} thread{'s' if d.threads != 1 else ''}")
        if d.started is not None:
            text.append(f"  since {datetime.fromtimestamp(d.started).strftime('%H:%M:%S')}",
                        style="dim")
    hidden = len(app.pids) - len(details)
    if hidden > 0:
        text.append(f"\n… and {hidden} more", style="dim")
    if app.n_procs > len(app.pids):
        text.append(f"\n(the sample keeps {len(app.pids)} of its {app.n_procs} pids)", style="dim")
    return text
