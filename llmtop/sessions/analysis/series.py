"""A run's per-request series as plain data, for pictures (the TUI's plots screen; the HTML
report's figures use the same gaps): each request's TTFT and decode rate in run order, marked
ok / warm-up / excluded, and the inter-token gaps of the ok ones. Pure; no plotting library.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from llmtop.sessions.analysis.run import Analysis, BenchStatus, RequestVerdict, SizeAnalysis
from llmtop.sessions.measure.metrics import SERVER_DECODE, TTFT
from llmtop.sessions.records.request import RequestRecord

KINDS = ("ok", "warmup", "excluded")


def chunk_gaps_ms(record: RequestRecord) -> list[float]:
    """The gaps between a request's consecutive streamed chunks, ms (the inter-token
    latencies as the client saw them; the first chunk's wait is TTFT, not a gap)."""
    return [(b[0] - a[0]) / 1e6 for a, b in itertools.pairwise(record.chunks)]


def kind_of(r: RequestVerdict) -> str:
    """"warmup", "ok" (in the statistics) or "excluded" (measured, not counted)."""
    if r.phase == "warmup":
        return "warmup"
    return "ok" if r.status == BenchStatus.OK else "excluded"


def size_label(size: SizeAnalysis) -> str:
    """"200 tok", "200 tok · relay", or "interactive" (a TUI session)."""
    label = "interactive" if size.target is None else f"{size.target} tok"
    return label + (f" · {size.path}" if size.path else "")


@dataclass(frozen=True)
class SizeSeries:
    """One prompt size's pictures as numbers. points: kind → [(request id, TTFT ms or None,
    server decode tok/s or None)] in run order; gaps: the ok requests' inter-token gaps, ms."""

    label: str
    points: dict[str, list[tuple[int, float | None, float | None]]]
    gaps: list[float]

    @property
    def ok_ttft(self) -> list[float]:
        """The ok requests' TTFT values, ms (n/a ones left out)."""
        return [t for _, t, _ in self.points["ok"] if t is not None]


def run_series(analysis: Analysis) -> list[SizeSeries]:
    """The series of every prompt size of an analysed run, in the order the sizes ran."""
    out = []
    for size in analysis.sizes:
        points: dict[str, list[tuple[int, float | None, float | None]]] = {k: [] for k in KINDS}
        for r in size.requests:
            points[kind_of(r)].append((r.record.id, r.record.metric(TTFT.key),
                                       r.record.metric(SERVER_DECODE.key)))
        gaps = [g for r in size.ok for g in chunk_gaps_ms(r.record)]
        out.append(SizeSeries(size_label(size), points, gaps))
    return out
