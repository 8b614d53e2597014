"""A request's throttles at its two edges, for the request's record (`machine.throttle`).

The throttles (probes/thermal.py: NVML's power and thermal reasons, Linux thermal zones at or
past a trip point, hwmon temperatures at their limit) are read once just before a request and
once as it ends, outside its timed span, and merged: a throttle seen at either edge was in
force during some of the request. Only for an engine on this machine: another machine's heat
is not this one's. `llmtop run` and the TUI's requests take them this way; a bench reads them
at its requests' edges from its own sampler.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING

from llmtop.sessions.runners.recorder import RequestFields

if TYPE_CHECKING:
    from llmtop.probes.thermal import ThrottleWatch
    from llmtop.sessions.measure.request import RequestResult


class ThrottleEdges:
    """One ThrottleWatch kept for a session's requests (its sensors found once, its NVML
    handle opened once). `edges()` reads the throttles now and returns the `late` hook of
    `SessionRecorder.measure` that reads them again at the request's end."""

    def __init__(self, watch: ThrottleWatch | None = None) -> None:
        from llmtop.probes.thermal import ThrottleWatch

        self._watch = watch or ThrottleWatch()

    def edges(self) -> Callable[[RequestResult], RequestFields]:
        """Read the throttles now (the request's start); the hook gives the record's
        `machine.throttle`: every throttle of either edge, merged (probes.thermal
        .merge_throttles), as dicts of the record's ThrottleRecord fields."""
        from llmtop.probes.thermal import merge_throttles

        before = self._watch.read()
        return lambda _result: RequestFields(machine={"throttle": [
            asdict(t) for t in merge_throttles(before + self._watch.read())]})
