"""Heat or a neighbour? Two findings of a system on chip (Apple Silicon), whose CPU, GPU and
Neural Engine share one package's heat and one memory.

The seed's story: on a Mac mini M4 decode fell 31 % and the author nearly wrote "on Apple
Silicon, heat breaks memory bandwidth first"; it was a browser sharing the memory bandwidth.
The two findings tell those apart from the probe samples taken during the measured requests
(their GPU device's `thermal_state` and `rails_w`, probes/apple.py):

* `thermal-pressure`: the kernel's thermal pressure (NSProcessInfo.thermalState's words) was
  fair, serious or critical during some measured requests, with the share of the requests
  that had a reading. Fair is a WARN (the OS starts to limit); serious or critical a FAIL
  (clocks are cut: every figure of those requests is the cooling's, not the engine's).
* `memory-bandwidth-contender`: another app was active (ACTIVE_CPU_PERCENT of a core or more)
  during some requests, and in those requests decode ran at least DECODE_DROP slower and the
  DRAM rail drew at least DRAM_RISE more power than in the requests without it. DRAM power is
  the memory's traffic (each byte moved costs energy), so decode slowing while the memory
  worked harder is a neighbour taking bandwidth, not heat, which would slow both. Judged
  only where the DRAM rail was read: without it a slower decode beside a busy app is the
  attribution's (analysis/attribution.py) to name.

Absent readings stay absent: a request without a reading is not counted, never nominal.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from llmtop.sessions.measure.metrics import CLIENT_DECODE, SERVER_DECODE
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.records.schema import FindingRecord, ProbeRecord

THERMAL_ORDER = {"nominal": 0, "fair": 1, "serious": 2, "critical": 3}
THERMAL_REMEDY = ("the chip was cooling itself down, so those requests measured the cooling, "
                  "not the engine: let the Mac cool before measuring, give it air (lid open, "
                  "off soft surfaces), or pause between runs (bench --cool-down)")
# % of one core: the probe verdict's app_cpu_warn (probes/verdict.py Thresholds), an app
# doing work rather than idling; the seed's slowdown was one browser tab
ACTIVE_CPU_PERCENT = 10.0
DECODE_DROP = 0.10  # decode slower by at least this share (the drift rule's 5 %, doubled)
# DRAM rail power higher by at least this share: the counter moves in batches of ~0.5 s
# (all-smi #424), so one sample's figure wobbles; the rule compares medians over requests,
# and 15 % stays clear of that wobble
DRAM_RISE = 0.15
MIN_REQUESTS = 2  # requests on each side of a comparison
NOT_APPS = frozenset({"measured engine", "llmtop"})  # probes.catalogue's ENGINE and SELF


def by_request(probes: Sequence[ProbeRecord]) -> dict[int, list[ProbeRecord]]:
    """The probe samples of each request they overlapped (request_id → samples)."""
    out: dict[int, list[ProbeRecord]] = {}
    for p in probes:
        if p.request_id is not None:
            out.setdefault(p.request_id, []).append(p)
    return out


def worst_thermal(samples: Sequence[ProbeRecord]) -> str | None:
    """The worst thermal state any GPU device of `samples` read, None when none read one."""
    states = [d.thermal_state for p in samples if p.gpu is not None for d in p.gpu.devices
              if d.thermal_state in THERMAL_ORDER]
    return max(states, key=THERMAL_ORDER.__getitem__) if states else None


def thermal_pressure_finding(ids: Sequence[int],
                             samples: Mapping[int, Sequence[ProbeRecord]]) -> FindingRecord | None:
    """`thermal-pressure` over the measured requests `ids` and their probe samples; None when
    no request had a thermal reading or every one stayed nominal. value: the share of the
    requests with a reading that were above nominal (%)."""
    worst = {i: w for i in ids if (w := worst_thermal(samples.get(i, ()))) is not None}
    hot = {i: w for i, w in worst.items() if w != "nominal"}
    if not hot:
        return None
    top = max(hot.values(), key=THERMAL_ORDER.__getitem__)
    share = 100.0 * len(hot) / len(worst)
    counts = ", ".join(f"{state} {n}" for state in ("fair", "serious", "critical")
                       if (n := sum(1 for w in hot.values() if w == state)))
    unread = f" ({len(ids) - len(worst)} without a reading)" if len(worst) < len(ids) else ""
    message = (f"thermal pressure reached {top} during {len(hot)} of {len(worst)} measured "
               f"requests ({share:.0f} %; {counts}){unread}")
    return FindingRecord("thermal-pressure", "warn" if top == "fair" else "fail", message,
                         THERMAL_REMEDY, round(share, 1), 0.0, "% of requests")


@dataclass(frozen=True, slots=True)
class RequestReading:
    """One measured request as the contender test sees it: decode rate (tokens/s), the DRAM
    rail's median power over its samples (W; None: not read), each other app's highest CPU
    (% of one core) and the worst thermal state (None: not read)."""

    id: int
    decode_tps: float
    dram_w: float | None
    apps: dict[str, float]
    thermal: str | None


def reading_of(record: RequestRecord, samples: Sequence[ProbeRecord]) -> RequestReading | None:
    """The request's reading, None without a decode rate or a sample."""
    decode = record.metric(SERVER_DECODE.key) or record.metric(CLIENT_DECODE.key)
    if not decode or not samples:
        return None
    dram = [w for p in samples if p.gpu is not None for d in p.gpu.devices
            if d.rails_w and (w := d.rails_w.get("dram")) is not None]
    apps: dict[str, float] = {}
    for p in samples:
        if p.processes is None or p.processes.warming_up:
            continue
        for a in p.processes.apps:
            if a.category not in NOT_APPS and a.cpu_percent is not None:
                apps[a.app] = max(apps.get(a.app, 0.0), a.cpu_percent)
    return RequestReading(record.id, decode, statistics.median(dram) if dram else None, apps,
                          worst_thermal(samples))


@dataclass(frozen=True, slots=True)
class Contender:
    """An app's effect: the medians with it active and without (decode tok/s, DRAM W), the
    requests it was active in, its median CPU there (% of a core), the drop and the rise."""

    app: str
    with_ids: tuple[int, ...]
    without_n: int
    cpu_percent: float
    decode_with: float
    decode_without: float
    dram_with: float
    dram_without: float
    thermal: str | None

    @property
    def drop(self) -> float:
        """How much slower decode ran with the app active (0.31 = 31 %)."""
        return 1.0 - self.decode_with / self.decode_without

    @property
    def rise(self) -> float:
        """How much more the DRAM rail drew with the app active (0.55 = 55 %)."""
        return self.dram_with / self.dram_without - 1.0


def _contender(app: str, readings: Sequence[RequestReading]) -> Contender | None:
    busy = [r for r in readings if r.apps.get(app, 0.0) >= ACTIVE_CPU_PERCENT]
    calm = [r for r in readings if r.apps.get(app, 0.0) < ACTIVE_CPU_PERCENT]
    dram_busy = [r.dram_w for r in busy if r.dram_w is not None]
    dram_calm = [r.dram_w for r in calm if r.dram_w is not None]
    if min(len(busy), len(calm), len(dram_busy), len(dram_calm)) < MIN_REQUESTS:
        return None
    states = [r.thermal for r in busy if r.thermal is not None]
    return Contender(app, tuple(r.id for r in busy), len(calm),
                     statistics.median(r.apps[app] for r in busy),
                     statistics.median(r.decode_tps for r in busy),
                     statistics.median(r.decode_tps for r in calm),
                     statistics.median(dram_busy), statistics.median(dram_calm),
                     max(states, key=THERMAL_ORDER.__getitem__) if states else None)


def contender_finding(records: Sequence[RequestRecord],
                      samples: Mapping[int, Sequence[ProbeRecord]]) -> FindingRecord | None:
    """`memory-bandwidth-contender` over the measured requests `records` and their probe
    samples: the app whose activity came with the largest decode drop while the DRAM rail
    rose (module docstring for the rule); None when none qualifies or DRAM was not read.
    value: the decode drop (%), threshold DECODE_DROP (%)."""
    readings = [r for rec in records if (r := reading_of(rec, samples.get(rec.id, ())))]
    names = {name for r in readings for name, cpu in r.apps.items() if cpu >= ACTIVE_CPU_PERCENT}
    found = [c for name in sorted(names) if (c := _contender(name, readings)) is not None
             and c.drop >= DECODE_DROP and c.rise >= DRAM_RISE]
    if not found:
        return None
    c = max(found, key=lambda c: c.drop)
    heat = (f"; thermal pressure stayed {c.thermal}" if c.thermal == "nominal"
            else f"; thermal pressure reached {c.thermal} too" if c.thermal else "")
    message = (f"{c.app} ({c.cpu_percent:.0f} % of a core) was active during "
               f"{len(c.with_ids)} of {len(c.with_ids) + c.without_n} measured requests: "
               f"decode ran {100 * c.drop:.0f} % slower ({c.decode_without:.1f} → "
               f"{c.decode_with:.1f} tok/s) while the DRAM rail drew {100 * c.rise:.0f} % "
               f"more ({c.dram_without:.2f} → {c.dram_with:.2f} W){heat}: it shares the "
               "memory bandwidth decode reads its weights through")
    remedy = (f"close or pause {c.app} while measuring (the CPU, GPU and Neural Engine read "
              "one memory: a busy app takes the bandwidth decode needs), then bench again")
    return FindingRecord("memory-bandwidth-contender", "warn", message, remedy,
                         round(100 * c.drop, 1), 100 * DECODE_DROP, "% decode drop")


def soc_findings(records: Sequence[RequestRecord],
                 probes: Sequence[ProbeRecord]) -> tuple[FindingRecord, ...]:
    """Both findings over the measured requests `records` (thermal first), the ones found."""
    samples = by_request(probes)
    found = (thermal_pressure_finding([r.id for r in records], samples),
             contender_finding(records, samples))
    return tuple(f for f in found if f is not None)


__all__ = ["ACTIVE_CPU_PERCENT", "DECODE_DROP", "DRAM_RISE", "contender_finding",
           "soc_findings", "thermal_pressure_finding"]
