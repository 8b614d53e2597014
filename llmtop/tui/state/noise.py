"""Which requests ran while the machine was NOISY, from the probe samples the app already
receives (pure: no Textual, no clocks, no extra sampling).

A sample counts for a request when it was *taken* (`ProbeSample.t_ns`, perf_counter_ns) between
the request's send stamp and its last event's stamp (the same clock, in this process), and so
does the one sample the app asks for as a request ends (its figures are over the time since
the sample before, which is the request's last stretch): it is added with the request's send
stamp (`ends`). Samples can reach the app after the request ended, so a request's mark is
re-derived whenever a noisy sample arrives, not only while it streams.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmtop.probes.verdict import Level, Verdict

if TYPE_CHECKING:  # the sampler's module imports psutil and the probes: after the first frame
    from llmtop.probes.sampler import ProbeSample

KEEP_NOISY = 4096  # noisy samples remembered (at 2 Hz: over half an hour)


def noisy_message(verdict: Verdict) -> str:
    """The first (worst) WARN/FAIL finding's message; "" for a QUIET verdict."""
    if verdict.quiet:
        return ""
    for finding in verdict.findings:
        if finding.level is not Level.INFO:
            return finding.message
    return "machine NOISY"


@dataclass(frozen=True, slots=True)
class NoisySample:
    """A NOISY probe sample: when it was taken (perf_counter_ns) and its first finding;
    ends: the send stamp of the request whose end it was taken for (None: an ordinary one)."""

    t_ns: int
    message: str
    ends: int | None = None


class NoiseTracker:
    """Remembers the NOISY samples (QUIET ones are dropped); answers "was the machine noisy
    between these two stamps?". `version` counts noisy samples, so views redraw only then."""

    def __init__(self, keep: int = KEEP_NOISY) -> None:
        self._noisy: deque[NoisySample] = deque(maxlen=keep)
        self.version = 0

    def add(self, sample: ProbeSample, ends: int | None = None) -> bool:
        """Take one sample (`ends`: the send stamp of the request whose end it was taken
        for); True when it was NOISY (and so may change a request's mark)."""
        message = noisy_message(sample.verdict)
        if not message:
            return False
        self._noisy.append(NoisySample(sample.t_ns, message, ends))
        self.version += 1
        return True

    def during(self, start_ns: int, end_ns: int | None) -> list[NoisySample]:
        """The noisy samples taken in [start_ns, end_ns] (end None: still running), and the
        one taken at the end of the request sent at start_ns, in order."""
        if start_ns <= 0:
            return []  # not sent yet
        return [
            s for s in self._noisy if s.ends == start_ns
            or (s.t_ns >= start_ns and (end_ns is None or s.t_ns <= end_ns))
        ]

    def first_during(self, start_ns: int, end_ns: int | None) -> str | None:
        """The first noisy sample's message in [start_ns, end_ns], or None when quiet."""
        found = self.during(start_ns, end_ns)
        return found[0].message if found else None
