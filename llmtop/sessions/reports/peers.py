"""`llmtop report LOG --as TOOL`: a run in another tool's definitions (analysis/peers.py),
beside llmtop's own, as markdown or JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from llmtop.sessions.analysis.peers import DEFINITIONS, METRICS, compare
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.reports.text import md_table


def _n(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.2f}"


def _diff(theirs: float | None, ours: float | None) -> str:
    if theirs is None or ours is None:
        return "n/a"
    pct = f" ({(theirs - ours) / ours:+.1%})" if ours else ""
    return f"{theirs - ours:+,.2f}{pct}"


@dataclass(frozen=True, slots=True)
class Trust:
    """What the run's own analysis says of it, carried into `--as` output (else
    a CONTAMINATED run's GuideLLM table had no word of its noise): the verdict's word and
    reasons, and the NOISY probe samples among those taken during its requests."""

    verdict: str
    reasons: tuple[str, ...] = ()
    noisy_samples: int = 0
    samples: int = 0

    def line(self) -> str:
        """"**Verdict: CONTAMINATED** — …; NOISY in 8 of 17 probe samples during its
        requests"."""
        why = f" — {'; '.join(self.reasons)}" if self.reasons else ""
        noise = (f"; NOISY in {self.noisy_samples} of {self.samples} probe samples during "
                 "its requests" if self.noisy_samples else "")
        return f"**Verdict: {self.verdict.upper()}**{why}{noise}"


def by_size(records: Sequence[RequestRecord]) -> list[tuple[int | None, list[RequestRecord]]]:
    """The records grouped by prompt size (`prompt_tokens_target`; None: an interactive
    session's), smallest first: a statistic pooled over sizes is a value no size has (a
    TTFT p50 of 417 ms midway between 213 ms at 100 tokens and 621 ms
    at 300)."""
    groups: dict[int | None, list[RequestRecord]] = {}
    for r in records:
        if r.status == "ok" and r.measured:  # what the tables count (analysis.peers)
            groups.setdefault(r.plan.prompt_tokens_target, []).append(r)
    return sorted(groups.items(), key=lambda kv: (kv[0] is not None, kv[0] or 0))


def _size_title(target: int | None) -> str:
    return "interactive" if target is None else f"{target} tok"


def _table(records: Sequence[RequestRecord], tool: str) -> tuple[int, list[str]]:
    theirs, ours = compare(records, tool)
    rows = [
        (m.label, _n(theirs.median[m.key]), _n(theirs.mean[m.key]), _n(ours.median[m.key]),
         _diff(theirs.median[m.key], ours.median[m.key]), DEFINITIONS[tool][m.label])
        for m in METRICS
    ]
    return theirs.n, md_table(("metric (ms)", f"{tool} p50", f"{tool} mean", "llmtop p50",
                               f"{tool} − llmtop (p50)", f"{tool}'s definition"), rows)


def markdown(records: Sequence[RequestRecord], tool: str, source: str,
             trust: Trust | None = None) -> str:
    """The markdown: the run's verdict (`trust`), then per prompt size (`by_size`) and
    metric the tool's median and mean, llmtop's median, the difference and the tool's
    definition (ms)."""
    sizes = by_size(records)
    theirs_n = compare(records, tool)[0].n
    lines = [
        f"# {source} as {tool} would report it",
        "",
        *([trust.line(), ""] if trust is not None else []),
        (f"{theirs_n} ok measured requests, each recomputed from its logged chunk stamps and "
        f"token counts in {tool}'s definitions (n = the server's output-token count; "
        "docs/guide/peers.md cites each definition)"
        + ("; one table per prompt size." if len(sizes) > 1 else ".")),
    ]
    for target, group in sizes:
        n, table = _table(group, tool)
        if len(sizes) > 1:
            lines += ["", f"## {_size_title(target)} ({n} ok)"]
        lines += ["", *table]
    lines += [
        "",
        "llmtop's own definitions: " + "; ".join(
            f"{k} {v}" for k, v in DEFINITIONS["llmtop"].items()) + ".",
    ]
    if tool == "vllm":
        empty = sum(1 for r in records if r.status == "ok" and r.measured and r.chunks
                    and not (r.chunks[0][1] or r.chunks[0][2]))
        note = (f"{empty} of {theirs_n} requests have a text-less first chunk in the log. "
                "llmtop's OpenAI-compatible client reads a role-only chunk without stamping "
                "it, so where none is logged vllm's TTFT here starts at the first text chunk "
                "and reads up to one chunk gap later than `vllm bench serve` would.")
        lines += ["", note]
    return "\n".join(lines) + "\n"


def json_text(records: Sequence[RequestRecord], tool: str, source: str,
              trust: Trust | None = None) -> str:
    """The same as one JSON object: {tool, source, n, verdict {word, reasons, noisy_samples,
    samples} (with `trust`), tool's and llmtop's median/mean (pooled), definitions, and with
    several prompt sizes `sizes`: [{prompt_tokens_target, n, as, llmtop}] per size}."""
    theirs, ours = compare(records, tool)
    data: dict[str, Any] = {
        "tool": tool, "source": source, "n": theirs.n,
        **({"verdict": {"word": trust.verdict, "reasons": list(trust.reasons),
                        "noisy_samples": trust.noisy_samples, "samples": trust.samples}}
           if trust is not None else {}),
        "as": asdict(theirs), "llmtop": asdict(ours), "definitions": DEFINITIONS[tool],
    }
    sizes = by_size(records)
    if len(sizes) > 1:  # the pooled figures above, and each size's own
        data["sizes"] = [{"prompt_tokens_target": target, "n": (pair := compare(g, tool))[0].n,
                          "as": asdict(pair[0]), "llmtop": asdict(pair[1])}
                         for target, g in sizes]
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
