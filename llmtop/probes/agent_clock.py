"""Map an agent's clock onto ours: the offset from request round trips (Cristian's method).

The agent stamps its samples with its own `perf_counter_ns()`, a monotonic clock with an
arbitrary zero on another machine. To tag a remote sample with the requests it overlapped,
its stamp must be on the client's clock. One exchange: the client reads its clock (`sent`),
asks the agent for its clock (`agent`), reads its clock again on the answer (`received`).
Assuming the agent read its clock somewhere between the two, the offset is

    offset = agent − (sent + received) / 2,   |error| ≤ (received − sent) / 2,

F. Cristian, "Probabilistic clock synchronization", Distributed Computing 3 (1989); NTP's
clock filter likewise keeps the exchange with the smallest round trip, whose bound is the
tightest (RFC 5905, section 10). `uncertainty_ns` records that bound.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ClockEstimate:
    """agent clock − client clock, in ns, from the best of `exchanges` round trips.

    offset_ns: add to a client stamp to get the agent's; subtract from an agent stamp
    (`to_client`). uncertainty_ns: half the round trip of the exchange used (the bound on the
    error). rtt_ns: that round trip.
    """

    offset_ns: int
    uncertainty_ns: int
    rtt_ns: int
    exchanges: int

    def to_client(self, agent_ns: int) -> int:
        """An agent stamp on the client's clock (ns)."""
        return agent_ns - self.offset_ns

    def to_dict(self) -> dict[str, int]:
        """JSON-ready: offset, uncertainty, round trip (ns) and the number of exchanges."""
        return {"clock_offset_ns": self.offset_ns, "clock_uncertainty_ns": self.uncertainty_ns,
                "clock_rtt_ns": self.rtt_ns, "clock_exchanges": self.exchanges}


def estimate_offset(exchanges: Iterable[tuple[int, int, int]]) -> ClockEstimate:
    """The offset from `(sent_ns, agent_ns, received_ns)` exchanges (module docstring): the
    one with the smallest round trip wins. Raises ValueError when there is none, or when one
    was received before it was sent."""
    best: tuple[int, int, int] | None = None
    count = 0
    for sent, agent, received in exchanges:
        if received < sent:
            raise ValueError(f"an exchange received ({received}) before it was sent ({sent})")
        count += 1
        if best is None or received - sent < best[2] - best[0]:
            best = (sent, agent, received)
    if best is None:
        raise ValueError("no clock exchange to estimate the offset from")
    sent, agent, received = best
    rtt = received - sent
    return ClockEstimate(agent - (sent + received) // 2, (rtt + 1) // 2, rtt, count)
