"""The requests of a run that a comparison reads, grouped: `Group`, one per prompt size.

Bench, load and TUI session logs all read the same way: each prompt size's baseline (the ok
requests outside every slow episode: analysis/run.py's `SizeAnalysis.baseline`, the requests
the bench report's medians are of) grouped by prompt size (`prompt_tokens_target`), relay
path and, in a load log, level; a watch log's by caller and model (analysis/watch.py's
`group_key`). `baseline_values` is what a run of a `bench --runs` set contributes
(analysis/compare/runs.py). The analysis read is analysis/run.py's `analyze_run`, the one the report
and the verdict use, so a comparison's medians and n are the report's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from llmtop.engines.events import Status
from llmtop.sessions.analysis.run import Analysis, SizeAnalysis
from llmtop.sessions.analysis.watch import group_key
from llmtop.sessions.measure.depths import depth_label


@dataclass(frozen=True)
class Group:
    """The ok requests of one prompt size (and relay path, and load level) of one run.

    label: "200 tok", "200 tok · relay", "200 tok · level 3", "depth 4k", "interactive". values: the
    metric field name → the ok requests' values, in request order (n/a ones left out)."""

    target: int | None
    label: str
    values: dict[str, list[float]]


def groups(analysis: Analysis, keys: Iterable[str]) -> list[Group]:
    """The baseline of a run (its ok requests outside every slow episode: a request of an
    episode the bench set aside and re-measured is no more compared than it is reported),
    grouped by prompt size, relay path and load level (a request's `level`, present once
    load logs type it; None otherwise), in run order; a watch log's by caller and model
    ("caller · model"), every request that ended ok."""
    keys = list(keys)
    out: dict[tuple[Any, ...], Group] = {}
    for size in analysis.sizes:
        # a watched app's request counts when it ended ok: a prefix-cache hit (no prompt
        # evaluation time) is what apps' traffic is made of, not a bench's flaw
        ok = [r for r in size.requests if r.record.watch.endpoint is not None
              and r.record.status == Status.OK] or size.baseline
        for r in ok:
            level = r.record.load.level
            key: tuple[Any, ...] = (size.target, size.path, level)
            if r.record.watch.endpoint is not None:  # a watched app's request: by caller and model
                caller, model = group_key(r.record)
                key = ("watch", caller, model)
                if key not in out:
                    out[key] = Group(None, f"{caller} · {model}", {k: [] for k in keys})
            if key not in out:
                label = size_label(size)
                label += f" · level {level}" if level is not None else ""
                out[key] = Group(size.target, label, {k: [] for k in keys})
            for k in keys:
                value = r.record.metric(k)
                if value is not None and math.isfinite(value):
                    out[key].values[k].append(value)
    return list(out.values())


def size_label(size: SizeAnalysis) -> str:
    """A size's group as a comparison names it: "200 tok", "depth 4k" (a context-depth sweep's
    size: its requests carry `depth`, so two depth sweeps pair depth by depth), "interactive",
    and " · relay" / " · direct" after it in a --compare-relay run."""
    depth = next((r.record.plan.depth for r in size.requests
                  if r.record.plan.depth is not None), None)
    if depth is not None:
        label = f"depth {depth_label(depth)}"
    else:
        label = "interactive" if size.target is None else f"{size.target} tok"
    return label + (f" · {size.path}" if size.path else "")


def common_groups(ga: Sequence[Group], gb: Sequence[Group]
                  ) -> tuple[list[Group], list[Group], list[str]]:
    """Two watch logs' groups paired by label ("caller · model"), in A's order, and a
    warning naming the groups only one of them has (they are left out)."""
    by_b = {g.label: g for g in gb}
    both = [g for g in ga if g.label in by_b]
    only = [f"A: {g.label}" for g in ga if g.label not in by_b]
    only += [f"B: {g.label}" for g in gb if g.label not in {x.label for x in ga}]
    warning = ([f"compared only the callers and models both logs saw; left out {', '.join(only)}"]
               if only else [])
    return both, [by_b[g.label] for g in both], warning


def baseline_values(analysis: Analysis, keys: Iterable[str]) -> list[Group]:
    """As `groups`, of each prompt size's baseline (the ok requests outside every slow
    episode) instead of all its ok requests: what a run of a `--runs` set contributes."""
    keys = list(keys)
    out = []
    for size in analysis.sizes:
        label = size_label(size)
        values = {k: [v for r in size.baseline if (v := r.record.metric(k)) is not None
                      and math.isfinite(v)] for k in keys}
        out.append(Group(size.target, label, values))
    return out
