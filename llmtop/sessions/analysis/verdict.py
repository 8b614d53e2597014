"""A run's verdict, one word everywhere: the TUI's badge, `bench`'s exit code and stderr,
`report`, the sessions list and `compare` all read `judge`'s answer (through
`run.Analysis.judgement`). Pure.

The words (docs/guide/bench.md, "The verdict"):

* **contaminated**, with its cause, when any of these holds, in this order:
  1. a deciding series is a *trend* the whole way (episodes.Shape.TREND: a line explains it
     better than steps) — heat, a leak, a filling cache: no request of the run is a
     baseline;
  2. a deciding metric drifted between the first 5 and the last 5 baseline requests (the
     requests outside every episode), in *either* direction (stats.drift's three tests:
     threshold, floor, rank test): a run that gets faster was slowed at its start, and a
     large change either way is instability, not a pass;
  3. more than NOISY_SHARE (a tenth) of the measured requests outside the episodes ran while
     the probes called the machine NOISY (a NOISY probe sample overlapped the request, as the
     TUI's "!" marks): a baseline measured on a machine its own probes call noisy is not a
     baseline, whatever its series look like (a run said CLEAN while 717 of 717
     samples said NOISY). Counted by request, not by sample: a short run's one NOISY sample,
     the only sample taken, is one request of many, not "100 % of the samples". The
     requests inside an episode are left out of the count as they are out of the figures: a
     burner that slowed requests 5–15, found, named and re-measured around, leaves a clean
     baseline (run.noisy_requests, baseline_only);
  4. no level holds the run: a deciding series' largest level holds fewer than half of its
     requests, or each has one but fewer than half of the requests are at all of them at
     once (episodes.py, "Baseline and episodes": an episode is a minority departure);
  5. an episode is *faster* than the baseline: contention only takes time, so the
     majority's level was itself slowed (or the engine changed state) and is not the
     engine's quiet figure — unless re-measuring made the faster level the majority, when
     the earlier slow level is the (slower) episode and this rule no longer applies;
  6. episodes were found and fewer than the protocol's requests are left outside them (the
     re-measuring budget ran out, or re-measuring was off);
* **inconclusive** when nothing could be judged (fewer ok requests than drift and the
  episode finder need);
* **clean after re-measuring** when episodes were found, excluded (named in the reasons)
  and enough requests outside them make the baseline;
* **clean** otherwise.

Exit codes (bench): contaminated → ExitCode.NOISY (1); the others → 0, as a baseline was
obtained (clean after re-measuring included: README, "Exit codes").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from llmtop.sessions.analysis.episodes import Episode

# More than a tenth of the measured requests ran during a NOISY sample: contaminated. The same
# share as compare's distrust (compare_checks.NOISY_SHARE): a run the bench called CLEAN with
# 5 of 14 requests NOISY was NOT ATTRIBUTABLE in compare; one run, one
# trust. A tenth of a 25-request run is enough to move its spread.
NOISY_SHARE = 0.10
# More than half: the bench stops re-measuring (more requests would meet the same noise).
REMEASURE_STOP_SHARE = 0.5


class Word(StrEnum):
    """The verdict's word; `str(word).upper()` is how it is shown."""

    CLEAN = "clean"
    CLEAN_AFTER_REMEASURING = "clean after re-measuring"
    CONTAMINATED = "contaminated"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True, slots=True)
class SizeEvidence:
    """What one prompt size says, as plain data. label: "200 tok"; trends: label of a
    trending series → its line's change over the run, %; drifted: "decode (server) −7.1 %"
    for each deciding metric whose baseline drift counted (either direction); episodes: the
    episodes found; baseline_n: ok requests outside them; required: the protocol's request
    count (None: not a bench, no count to reach); judged: the finder or drift could judge;
    unsettled: label of a series with no baseline level → (requests at its largest level,
    requests judged); disagree: (requests at every series' baseline level, requests judged)
    when under half; faster: one "requests 31–50 (TTFT ms −23 %)" per faster episode."""

    label: str
    trends: dict[str, float] = field(default_factory=dict)
    drifted: tuple[str, ...] = ()
    episodes: tuple[Episode, ...] = ()
    baseline_n: int = 0
    required: int | None = None
    judged: bool = True
    unsettled: dict[str, tuple[int, int]] = field(default_factory=dict)
    disagree: tuple[int, int] | None = None
    faster: tuple[str, ...] = ()
    unjudged: str | None = None  # why nothing was judged, when it was not for want of requests


@dataclass(frozen=True, slots=True)
class RunVerdict:
    """The word and why, one sentence a reason ("200 tok: decode (server) is a trend, −27 %
    from the first to the last request")."""

    word: Word
    reasons: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """The word as shown: "CLEAN AFTER RE-MEASURING"."""
        return str(self.word).upper()

    @property
    def contaminated(self) -> bool:
        """True for CONTAMINATED."""
        return self.word == Word.CONTAMINATED


def _episodes(episodes: Sequence[Episode]) -> str:
    return ", ".join(f"requests {e.requests}" for e in episodes)


def too_noisy(noisy: tuple[int, int]) -> bool:
    """(measured requests a NOISY probe sample overlapped, measured requests): more than
    NOISY_SHARE of them were NOISY, the rule that makes a run CONTAMINATED."""
    bad, total = noisy
    return total > 0 and bad > NOISY_SHARE * total


def mostly_noisy(noisy: tuple[int, int]) -> bool:
    """More than REMEASURE_STOP_SHARE of the measured requests were NOISY: the bench stops
    re-measuring, as more requests would meet the same noise."""
    bad, total = noisy
    return total > 0 and bad > REMEASURE_STOP_SHARE * total


def judge(sizes: Sequence[SizeEvidence], noisy: tuple[int, int] = (0, 0)) -> RunVerdict:
    """The verdict of a run from each prompt size's evidence and (measured requests outside
    the episodes that overlapped a NOISY probe sample, those requests) (the module
    docstring's rules, in order)."""
    reasons = []
    for s in sizes:
        reasons += [
            f"{s.label}: {name} is a trend the whole way ({pct:+.0f} % from the first to the "
            "last request)"
            for name, pct in s.trends.items()
        ]
        if s.drifted:
            reasons.append(
                f"{s.label}: drifted between the first and last 5 baseline requests: "
                + ", ".join(s.drifted)
            )
    bad, total = noisy
    if too_noisy(noisy):
        outside = " outside the episodes" if any(s.episodes for s in sizes) else ""
        reasons.append(
            f"the probes found the machine NOISY during {bad} of the {total} measured "
            f"requests{outside}"
        )
    for s in sizes:
        reasons += [
            f"{s.label}: no level of {name} holds half of the requests (the largest holds "
            f"{held} of {n}): the run has no baseline level"
            for name, (held, n) in s.unsettled.items()
        ]
        if s.disagree is not None:
            reasons.append(
                f"{s.label}: the series' episodes together cover most of the run: only "
                f"{s.disagree[0]} of {s.disagree[1]} requests are at every series' baseline level"
            )
        if s.faster:
            reasons.append(
                f"{s.label}: faster than the baseline during " + ", ".join(s.faster)
                + ": contention only takes time, so the baseline's level was itself slowed "
                "(or the engine changed state)"
            )
        if s.episodes and s.required is not None and s.baseline_n < s.required:
            reasons.append(
                f"{s.label}: only {s.baseline_n} of the {s.required} requests are outside the "
                f"episodes (in episodes: {_episodes(s.episodes)}): the re-measuring budget "
                "ran out, or re-measuring was off"
            )
    if reasons:
        return RunVerdict(Word.CONTAMINATED, tuple(reasons))
    if not any(s.judged for s in sizes):
        why = tuple(s.unjudged for s in sizes if s.unjudged)
        return RunVerdict(Word.INCONCLUSIVE, why or ("too few ok requests to judge",))
    excluded = [
        f"{s.label}: episodes excluded ({_episodes(s.episodes)}); the baseline is the "
        f"{s.baseline_n} requests outside them"
        for s in sizes
        if s.episodes
    ]
    if excluded:
        return RunVerdict(Word.CLEAN_AFTER_REMEASURING, tuple(excluded))
    return RunVerdict(Word.CLEAN)
