"""A request's throttles at its two edges (runners/throttles.py), as `llmtop run` and the TUI's
requests take them: read before the request and as it ends, merged, in the record's
`machine.throttle`; only for an engine on this machine and with the probes on."""

from __future__ import annotations

from llmtop.engines.base import ModelInfo
from llmtop.engines.connection import Connection
from llmtop.probes.thermal import Throttle
from llmtop.sessions.runners.throttles import ThrottleEdges
from llmtop.tui.link import EngineLink
from llmtop.tui.state.settings import TuiSettings
from tests.tui.fakes import FakeEngine

HOT = Throttle("CPU", "thermal", "thermal_zone", "thermal_zone1 x86_pkg_temp",
               "99.5 °C >= passive trip 95.0 °C")
CAPPED = Throttle("GPU", "power", "nvml", "gpu0", "sw_power_cap")


class Readings:
    """A ThrottleWatch replaying one reading per call (the request's start, then its end)."""

    def __init__(self, *readings: tuple[Throttle, ...]) -> None:
        self.readings = list(readings)

    def read(self) -> tuple[Throttle, ...]:
        return self.readings.pop(0)


def test_either_edges_throttle_is_the_requests() -> None:
    # hot at the start only, power-capped at the end only: the request saw both
    edges = ThrottleEdges(Readings((HOT,), (CAPPED,)))  # type: ignore[arg-type]
    hook = edges.edges()
    fields = hook(None)  # type: ignore[arg-type]
    assert sorted(t["device"] for t in fields.machine["throttle"]) == [
        "gpu0", "thermal_zone1 x86_pkg_temp"]
    # the same throttle at both edges is one entry
    same = ThrottleEdges(Readings((HOT,), (HOT,))).edges()(None)  # type: ignore[arg-type]
    assert [t["detail"] for t in same.machine["throttle"]] == ["99.5 °C >= passive trip 95.0 °C"]
    # none at either edge: an empty list (read, and nothing seen), not absent
    none = ThrottleEdges(Readings((), ())).edges()(None)  # type: ignore[arg-type]
    assert none.machine == {"throttle": []}


def _link(host: str, **settings: object) -> EngineLink:
    link = EngineLink(TuiSettings(**settings), None,  # type: ignore[arg-type]
                      post=lambda m: None, idle=lambda: True)
    engine = FakeEngine()
    engine.host = host  # type: ignore[misc]
    link.conn = Connection(engine=engine, model="m", info=ModelInfo(name="m"),
                           version="1")
    return link


def test_the_tuis_requests_take_them_only_for_an_engine_here_with_probes() -> None:
    link = _link("http://127.0.0.1:11434")
    link._throttles = ThrottleEdges(Readings((HOT,), ()))  # type: ignore[arg-type]
    hook = link.throttle_edges()
    assert hook is not None
    assert [t["part"] for t in hook(None).machine["throttle"]] == ["CPU"]  # type: ignore[arg-type]
    assert _link("http://10.1.2.3:11434").throttle_edges() is None  # another machine's heat
    assert _link("http://127.0.0.1:11434", probes=False).throttle_edges() is None
    assert _link("http://127.0.0.1:11434",
                 agent="http://10.1.2.3:11435").throttle_edges() is None
