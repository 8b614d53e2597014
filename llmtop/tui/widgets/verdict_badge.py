"""QUIET / NOISY badge with its reasons (the verdict's finding messages and remedies): the
probe panel's first section."""

from __future__ import annotations

from rich.text import Text

from llmtop.probes.verdict import Level, Verdict

_LEVEL_STYLE = {Level.FAIL: "bold red", Level.WARN: "yellow", Level.INFO: "dim"}
MAX_FINDINGS = 4


def verdict_text(verdict: Verdict, remedies: bool = True,
                 max_findings: int | None = None) -> Text:
    """The badge line plus up to MAX_FINDINGS findings (or `max_findings`), worst first,
    each with its remedy unless `remedies` is False (a short panel: the report and the
    strip's NOISY line keep them; a dim line says so)."""
    limit = MAX_FINDINGS if max_findings is None else max_findings
    warming = any(f.code == "warming-up" for f in verdict.findings)
    if not verdict.quiet:
        text = Text.assemble((" NOISY ", "bold white on red"))
    elif warming:
        text = Text.assemble((" WAIT ", "bold black on yellow"))
        text.append(" warming up", style="dim")
    else:
        text = Text.assemble((" QUIET ", "bold black on green"))
    shown = verdict.findings[:limit]
    for f in shown:
        text.append(f"\n• {f.message}", style=_LEVEL_STYLE.get(f.level, ""))
        if remedies and f.level is not Level.INFO and f.remedy:
            text.append(f"\n  → {f.remedy}", style="dim")
    hidden = len(verdict.findings) - len(shown)
    if hidden > 0:
        text.append(f"\n  (+{hidden} more in the session log)", style="dim")
    if not remedies and any(f.level is not Level.INFO and f.remedy for f in shown):
        text.append("\n  (what to do: the session report, Ctrl+O)", style="dim")
    return text
