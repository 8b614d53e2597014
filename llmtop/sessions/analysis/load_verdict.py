"""A load sweep's verdict: one word for the load screen, `llmtop load`'s report and exit code,
`llmtop report` and the sessions list (a sweep whose levels ran NOISY claimed
its knee as if it were clean). Pure.

The words are the bench's (verdict.Word), with the sweep's own rules:

* **contaminated** when any level ran NOISY (a probe sample inside the level had a WARN or
  FAIL finding: analysis/load.probe_verdict). A sweep is read as a curve, level against
  level: one level slowed by a neighbour bends the curve and moves the knee, and a level has
  no re-measuring (bench's episodes) to set it right; so a single NOISY level is enough, and
  the knee is shown as not trusted beside it;
* **inconclusive** when no level has a probe sample (probes off, or levels shorter than the
  probes' period): nothing shows whether the machine was quiet;
* **clean** when every level that was sampled was QUIET.

Exit code (`llmtop load`): contaminated → ExitCode.NOISY (1), as `bench` (README, "Exit
codes"); the figures are still printed and logged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from llmtop.sessions.analysis.verdict import RunVerdict, Word

NOT_TRUSTED = "not trusted"


class SampledLevel(Protocol):
    """The part of a sweep's level the verdict reads (load.LevelResult has it): its value
    (users or req/s), its label ("4 users") and its probe verdict ("QUIET", "NOISY: codes…"
    or "no samples", load.probe_verdict). A protocol, so this module needs nothing of load.py,
    which imports it."""

    @property
    def value(self) -> float: ...

    @property
    def label(self) -> str: ...

    @property
    def verdict(self) -> str: ...


Level = TypeVar("Level", bound=SampledLevel)


def noisy_levels(levels: Sequence[Level]) -> list[Level]:
    """The levels that ran NOISY (their probe verdict), lowest level first."""
    return [lv for lv in sorted(levels, key=lambda lv: lv.value)
            if lv.verdict.startswith("NOISY")]


def judge_sweep(levels: Sequence[SampledLevel]) -> RunVerdict:
    """The sweep's verdict from its levels' probe verdicts (rules in the module docstring);
    each reason names a NOISY level and its findings' codes ("2 users: NOISY: background-cpu,
    cpu-steal"), in level order."""
    ordered = sorted(levels, key=lambda lv: lv.value)
    noisy = noisy_levels(ordered)
    if noisy:
        return RunVerdict(Word.CONTAMINATED, tuple(f"{lv.label}: {lv.verdict}" for lv in noisy))
    if any(lv.verdict == "QUIET" for lv in ordered):
        return RunVerdict(Word.CLEAN)
    if not ordered:
        return RunVerdict(Word.INCONCLUSIVE, ("no level ran",))
    unsampled = ("no probe sample in any level: nothing shows whether the machine was quiet "
                 "(probes off, or levels shorter than a probe period)")
    return RunVerdict(Word.INCONCLUSIVE, (unsampled,))


def verdict_line(verdict: RunVerdict) -> str:
    """The verdict in one line: "CLEAN", "CONTAMINATED — 2 users: NOISY: background-cpu"."""
    if not verdict.reasons:
        return verdict.label
    return f"{verdict.label} — " + "; ".join(verdict.reasons)


def knee_head(verdict: RunVerdict) -> str:
    """What the knee's sentence is introduced by: "Knee", or "Knee (not trusted: a level ran
    NOISY; re-run on a quiet machine)" when the sweep is contaminated."""
    if not verdict.contaminated:
        return "Knee"
    n = len(verdict.reasons)
    which = "a level" if n == 1 else f"{n} levels"
    return f"Knee ({NOT_TRUSTED}: {which} ran NOISY; re-run on a quiet machine)"


def knee_line(sentence: str, verdict: RunVerdict) -> str:
    """The knee's sentence (load.Knee.sentence) as every view states it: "Knee: this engine
    serves 2 concurrent users within …." (knee_head says when it is not trusted)."""
    return f"{knee_head(verdict)}: {sentence}."
