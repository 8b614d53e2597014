"""What each slow episode cost and who caused it: "Chromium was busy
during requests 7–12; decode ran 31 % slower then". Pure: an analysed size and its log's
probe samples in, one `EpisodeCause` per episode out.

The rules are attribution.py's, with the episode in the place of the drift's last 5: the
episode's requests are the slow ones and the baseline's (the ok requests outside every
episode) the fast ones for the application contrast (attribute with `slow_ids`); the engine's
slowdown is the episode's change in the first series of run.ATTRIBUTION_ORDER that found it
(a rate's fall r0 → r1 is r0 / r1 − 1 slower in time); the machine's evidence compares each
canary part's and reading's median during the episode with the baseline's (a canary part
counts as slower when beyond the run's threshold and the two groups differ by the one-sided
rank test at stats.DRIFT_ALPHA). `attribution.name_cause` then names the app, the machine,
or no one, saying "during requests 7–12" where a drift says "in the second half".
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from llmtop.sessions.analysis.attribution import (
    Attribution,
    CanaryPart,
    Cause,
    EngineSlowdown,
    MachineEvidence,
    attribute,
    name_cause,
)
from llmtop.sessions.analysis.episodes import Episode
from llmtop.sessions.analysis.machine import CANARY_METRICS, READINGS, gpu_reasons, new_throttles
from llmtop.sessions.analysis.run import ATTRIBUTION_ORDER, SizeAnalysis
from llmtop.sessions.measure.metrics import METRICS, SERVER_DECODE
from llmtop.sessions.measure.stats import DRIFT_ALPHA, worse_p_value
from llmtop.sessions.records.schema import ProbeRecord


@dataclass(frozen=True, slots=True)
class EpisodeCause:
    """One episode with its cost and its cause. slowdown: the engine's, % of time (None
    when no series of ATTRIBUTION_ORDER found it); throttled: how the throttles its requests
    saw and the baseline's did not are said ("the GPU was power-capped"; machine.throttles);
    sentence: the user's line ("Chromium was busy during requests 7–12; decode (server) ran
    31 % slower then", "the GPU was power-capped during requests 8–13; …")."""

    episode: Episode
    attribution: Attribution
    cause: Cause | None
    slowdown: EngineSlowdown | None
    throttled: tuple[str, ...] = ()

    @property
    def sentence(self) -> str:
        """The cost of the episode in the user's units, with its culprit when one stands
        out."""
        when = f"requests {self.episode.requests}"
        if not self.episode.changes:  # every request in an episode: no baseline outside
            return (f"{when} leave no request outside the episodes to measure them "
                    "against: the run has no baseline level")
        cost = ""
        if self.slowdown is not None:
            pct = self.slowdown.slower_pct
            how = f"{abs(pct):.0f} % {'slower' if pct >= 0 else 'faster'}"
            cost = f"; {self.slowdown.label} ran {how} then"
        culprit = self.attribution.culprit
        if culprit is not None:
            return f"{culprit} was busy during {when}{cost}"
        if self.throttled:  # a power cap or a thermal limit the baseline did not have
            return f"{' and '.join(self.throttled)} during {when}{cost}"
        if self.cause is not None and self.cause.kind == "machine":
            return f"the machine itself slowed during {when}{cost}"
        return f"nothing the probes saw explains {when}{cost}"

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict."""
        return {
            "first": self.episode.first,
            "last": self.episode.last,
            "requests": list(self.episode.numbers),
            "changes_pct": {k: round(v, 2) for k, v in self.episode.changes.items()},
            "faster": list(self.episode.faster),
            "slower_pct": None if self.slowdown is None else round(self.slowdown.slower_pct, 2),
            "culprit": self.attribution.culprit,
            "throttled": list(self.throttled),
            "cause": None if self.cause is None else self.cause.to_dict(),
            "sentence": self.sentence,
        }


def slowdown(episode: Episode) -> EngineSlowdown | None:
    """The engine's slowdown in an episode, % of time, from the first series of
    ATTRIBUTION_ORDER that found it (a rate that fell 22 → 15.2 tok/s is 44.7 % slower)."""
    key = next((k for k in ATTRIBUTION_ORDER if k in episode.changes), None)
    if key is None:
        return None
    label, better = METRICS[key].shown, METRICS[key].higher_is_better
    change = episode.changes[key] / 100.0
    slower = (1.0 / (1.0 + change) - 1.0 if change > -1 else float("inf")) if better else change
    return EngineSlowdown(key, label, 100.0 * slower)


def _split(size: SizeAnalysis, episode: Episode, key: str) -> tuple[list[float], list[float]]:
    """(baseline values, episode values) of one series, n/a left out. By positions found
    once per size (`SizeAnalysis.baseline_positions`, `position_of`): a pass over every
    request for each episode and series was 10 s of a 100,000-request report."""
    values = size.series[key]
    outside = size.baseline_values(key)
    where = size.position_of
    inside = [v for n in episode.numbers
              if (i := where.get(n)) is not None and (v := values[i]) is not None]
    return outside, inside


def machine_during(size: SizeAnalysis, episode: Episode) -> MachineEvidence:
    """The canary's and the readings' medians during the episode against the baseline's."""
    parts = []
    t = size.threshold_pct
    for key, label, *_ in CANARY_METRICS:
        base, during = _split(size, episode, key)
        if not base or not during or statistics.median(base) == 0:
            continue
        b, d = statistics.median(base), statistics.median(during)
        change = (d - b) / b * 100.0
        p = worse_p_value(base, during, change < 0) if change else 1.0
        significant = p < DRIFT_ALPHA
        parts.append(
            CanaryPart(
                label.removeprefix("canary: "), change, change > t and significant, significant
            )
        )
    readings: dict[str, tuple[float | None, float | None]] = {}
    for key, *_ in READINGS:
        base, during = _split(size, episode, key)
        readings[key] = (
            statistics.median(base) if base else None,
            statistics.median(during) if during else None,
        )
    members = set(episode.numbers)
    recs_in = [r.record for r in size.ok if r.number in members]
    recs_out = [r.record for r in size.baseline]
    new = gpu_reasons(recs_in) - gpu_reasons(recs_out)
    return MachineEvidence(tuple(parts), readings, tuple(sorted(new)), t,
                           new_throttles(recs_in, recs_out, nvml=False))


def episode_causes(size: SizeAnalysis, probes: Sequence[ProbeRecord]) -> list[EpisodeCause]:
    """Every episode of a size with its cost and its cause (module docstring)."""
    out = []
    ok, where = size.ok, size.position_of
    base = [ok[i].record for i in size.baseline_positions]  # the same for every episode
    for episode in size.episodes.episodes:
        inside = [ok[i].record for n in episode.numbers if (i := where.get(n)) is not None]
        requests = inside + base
        ids = {r.id for r in inside}
        engine = slowdown(episode)
        key = engine.metric if engine else SERVER_DECODE.key
        att = attribute(requests, probes, key, METRICS[key].higher_is_better, slow_ids=ids)
        cause = None
        if engine is not None:
            cause = name_cause(
                att,
                engine,
                machine_during(size, episode),
                when=f"during requests {episode.requests}",
            )
        throttled = tuple(phrase for phrase, _ in new_throttles(inside, base))
        out.append(EpisodeCause(episode, att, cause, engine, throttled))
    return out
