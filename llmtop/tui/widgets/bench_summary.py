"""The bench's verdict once it ends, the one word of analysis/verdict.py: CLEAN /
CLEAN AFTER RE-MEASURING (the episodes excluded, each with its cost) / CONTAMINATED (with
its reasons) / n/a (too few requests to judge), then per prompt size n, warm-ups and
exclusions, and the baseline's medians; then the noisy requests.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from llmtop.sessions.analysis.run import Analysis, SizeAnalysis
from llmtop.sessions.measure.metrics import E2E, METRICS, PROMPT_EVAL, SERVER_DECODE, TTFT
from llmtop.sessions.measure.stats import DRIFT_WINDOW
from llmtop.tui.state import fmt
from llmtop.tui.state.bench_state import BenchRow, warm_note
from llmtop.tui.widgets.quiet_static import QuietStatic

CLEAN, CONTAMINATED, NA = "CLEAN", "CONTAMINATED", "n/a"
CLEAN_AFTER = "CLEAN AFTER RE-MEASURING"
_BADGE = {
    CLEAN: "bold black on green",
    CLEAN_AFTER: "bold black on green",
    CONTAMINATED: "bold white on red",
    NA: "bold black on yellow",
}
_WORD = {"contaminated": CONTAMINATED, "clean": CLEAN, "inconclusive": NA,
         "clean after re-measuring": CLEAN_AFTER}


def verdict(analysis: Analysis) -> str:
    """`Analysis.verdict` (analysis/verdict.py, the one rule) as the badge says it; n/a when
    nothing could be judged (fewer than 2 × 5 ok requests per size)."""
    return _WORD[analysis.verdict]


def drifting(size: SizeAnalysis) -> list[str]:
    """The metrics whose drift counts (`SizeAnalysis.drifted`: the drift rule, deciding
    metrics only), e.g. ["decode (server) tok/s -15.2 %"]."""
    return [
        f"{METRICS[key].heading} {d.change_pct:+.1f} %"
        for key in size.drifted
        if (d := size.drifts[key]).change_pct is not None
    ]


def _headline(analysis: Analysis) -> Text:
    word = verdict(analysis)
    text = Text.assemble((f" {word} ", _BADGE[word]), " ")
    threshold = f"±{analysis.drift_threshold_pct:g} %"
    if word == CONTAMINATED:
        text.append("; ".join(analysis.judgement.reasons), style="bold red")
    elif word == CLEAN_AFTER:
        text.append("; ".join(analysis.judgement.reasons))
    elif word == CLEAN:
        text.append(
            f"no slow episode, no trend, no metric drifted past {threshold} (median of the "
            f"first {DRIFT_WINDOW} vs the last {DRIFT_WINDOW} ok requests)"
        )
    else:
        n = min((len(s.ok) for s in analysis.sizes), default=0)
        text.append(
            f"drift needs ≥ {2 * DRIFT_WINDOW} ok requests per prompt size; this run has {n}",
            style="yellow",
        )
    return text


def _size_lines(size: SizeAnalysis) -> Text:
    target = "?" if size.target is None else str(size.target)
    in_episodes = len(size.ok) - len(size.baseline)
    text = Text.assemble(
        (f"\n{target} tok", "bold"),
        f"  n {len(size.baseline)} · {len(size.warmups)} warm-up kept apart · "
        f"{len(size.excluded)} excluded" + (f" · {in_episodes} in slow episodes"
                                              if in_episodes else ""),
    )
    if size.excluded:
        first = size.excluded[0]
        text.append(f" (#{first.index}: {first.status} — {first.reason})", style="red")
    for e in size.episodes.episodes:
        sizes = ", ".join(f"{METRICS[k].shown} {v:+.0f} %" for k, v in e.changes.items())
        kind = "faster episode" if e.faster else "slow episode"
        text.append(f"\n  {kind}: requests {e.requests} ({sizes}), left out of the "
                    "baseline", style="magenta")
    med = {key: s.median for key, s in size.summaries.items()}
    text.append("\n  medians  TTFT ")
    text.append(fmt.ms(med[TTFT.key]), style="bold")
    text.append(" · prefill ")
    text.append(fmt.ms(med[PROMPT_EVAL.key]), style="bold")
    text.append(" · decode ")
    text.append(fmt.rate(med[SERVER_DECODE.key]), style="bold")
    text.append(" (server) · E2E ")
    text.append(fmt.ms(med[E2E.key]), style="bold")
    return text


def noisy_text(rows: Sequence[BenchRow]) -> Text:
    """ "! 3 requests ran while the machine was NOISY: <first finding>" (or none did)."""
    noisy = [r for r in rows if r.noisy]
    if not noisy:
        return Text("no request ran during a NOISY probe sample", style="dim")
    many = "request" if len(noisy) == 1 else "requests"
    return Text.assemble(
        (f"! {len(noisy)} {many} ran while the machine was NOISY{warm_note(noisy)}: ",
         "bold yellow"),
        (str(noisy[0].noisy), "yellow"),
        (f" (#{', #'.join(str(r.n) for r in noisy)} in run order)", "dim"),
    )


def summary_text(analysis: Analysis, rows: Sequence[BenchRow], log_path: str) -> Text:
    """The verdict line, each prompt size's n and medians, the noisy requests, the log."""
    text = _headline(analysis)
    for size in analysis.sizes:
        text.append_text(_size_lines(size))
    text.append("\n")
    text.append_text(noisy_text(rows))
    text.append(f"\nlog {log_path}", style="dim")
    text.append("  R: full report", style="bold")
    return text


class BenchSummary(QuietStatic):
    """The verdict area: a hint before the run, the outcome or the failure after it."""

    def show_text(self, text: Text) -> None:
        """Show any text (a hint, a failure)."""
        self.set_text(text)

    def show_outcome(self, analysis: Analysis, rows: Sequence[BenchRow], log_path: str) -> None:
        """Show a finished run's verdict and where its log is."""
        self.set_text(summary_text(analysis, rows, log_path))
