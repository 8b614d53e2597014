"""The monitor's own footprint on the GPU: while nothing is measured the probe sampler reads
the GPU (and the energy sources) only on its slow beat, sampler.IDLE_GPU_BEAT_S (5 s); during
a request, in every sample. Counted on NVML's stand-in (GpuProbe's `nvml` seam) over
simulated ticks of the sampler's clock, without sleeping."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from llmtop.probes.gpu import GpuProbe
from llmtop.probes.sampler import IDLE_GPU_BEAT_S, ProbeSampler
from llmtop.tui.link import END_SAMPLE_S, EngineLink
from llmtop.tui.state.live import LiveRequest
from llmtop.tui.state.settings import TuiSettings
from tests.unit.test_probes_gpu import FakeNvml

S = 10**9


class CountingNvml(FakeNvml):
    """FakeNvml counting the utilisation reads: one per GPU sample of its one device."""

    def __init__(self) -> None:
        super().__init__()
        self.util_reads = 0

    def nvmlDeviceGetUtilizationRates(self, h: str) -> Any:
        self.util_reads += 1
        return super().nvmlDeviceGetUtilizationRates(h)


class CountingEnergy:
    """An energy reader that counts its samples (the NVML energy counter is a GPU call)."""

    def __init__(self) -> None:
        self.samples = 0

    def sample(self) -> dict[str, Any]:
        self.samples += 1
        return {}


def _sampler(nvml: CountingNvml, energy: CountingEnergy, now: list[int]) -> ProbeSampler:
    nothing = SimpleNamespace(sample=lambda: None)  # system and processes: not under test
    return ProbeSampler(1.0, gpu_probe=GpuProbe(nvml=nvml, drm_root=None),
                        system_probe=nothing, process_probe=nothing,  # type: ignore[arg-type]
                        energy=energy, measuring=False,  # type: ignore[arg-type]
                        clock=lambda: now[0])


def test_idle_reads_the_gpu_every_five_seconds_and_a_request_every_sample() -> None:
    assert IDLE_GPU_BEAT_S == 5.0
    nvml, energy, now = CountingNvml(), CountingEnergy(), [0]
    sampler = _sampler(nvml, energy, now)
    for second in range(20):  # idle, one sample a second: t = 0..19 s
        now[0] = second * S
        sample = sampler.sample_once()
        assert sample.gpu is not None and sample.gpu.devices[0].util_percent == 87.0
    # reads at t = 0, 5, 10, 15 s: 4 in 20 samples (not 20)
    assert (nvml.util_reads, energy.samples) == (4, 4)
    sampler.set_measuring(True)  # a request streams from t = 20 s: every sample reads
    for second in range(20, 26):
        now[0] = second * S
        sampler.sample_once()
    assert (nvml.util_reads, energy.samples) == (4 + 6, 4 + 6)
    sampler.set_measuring(False)  # idle again: the last read was at t = 25 s
    for tenth in range(261, 300):  # 26.1 .. 29.9 s: under 5 s since, reused
        now[0] = tenth * S // 10
        sampler.sample_once()
    assert nvml.util_reads == 10
    now[0] = 30 * S  # 5 s after the last read: the beat
    sampler.sample_once()
    assert (nvml.util_reads, energy.samples) == (11, 11)


def test_the_tuis_link_measures_from_a_request_to_its_end_sample() -> None:
    nvml, energy, now = CountingNvml(), CountingEnergy(), [0]
    link = EngineLink(TuiSettings(probes=False), None, post=lambda m: None, idle=lambda: True)
    sampler = link.sampler = _sampler(nvml, energy, now)
    sampler.set_measuring(True)
    link.set_probe_interval(streaming=False)
    assert sampler.measuring is False  # idle: the slow beat
    link.set_probe_interval(streaming=True)
    assert sampler.measuring is True
    live = LiveRequest.__new__(LiveRequest)
    link.sample_at_end(live)  # the end sample still covers the request
    assert (sampler.measuring, sampler.interval_s) == (True, END_SAMPLE_S)
    link._on_probe_thread(sampler.sample_once())  # that sample came: idle again
    assert sampler.measuring is False
    link.probe_for_bench()
    assert sampler.measuring is True


def test_a_watch_reads_the_gpu_while_a_request_streams_through_it() -> None:
    # the watch asks at each sample whether a request is streaming (commands/watch.py:
    # bool(session.streaming)); one sample a second for 12 s, a request streaming in 4..7 s
    nvml, energy, now = CountingNvml(), CountingEnergy(), [0]
    streaming: dict[int, object] = {}
    sampler = _sampler(nvml, energy, now)
    sampler.set_measuring(lambda: bool(streaming))
    read_at = []
    for second in range(12):
        now[0] = second * S
        if second == 4:
            streaming[1] = object()
        if second == 8:
            streaming.clear()
        before = nvml.util_reads
        sampler.sample_once()
        if nvml.util_reads > before:
            read_at.append(second)
    # idle beat at 0; every sample 4..7 (streaming); then the beat from the last read (7 s)
    # is due at 12 s, outside the run
    assert read_at == [0, 4, 5, 6, 7]


def test_the_watch_screens_rows_say_when_a_request_streams() -> None:
    # the TUI's watch screen asks its rows (`bool(rows.open)`) as `llmtop watch` asks its
    # session: a request is open from its first line to its finished line
    from llmtop.tui.state.watch_view import WatchRows

    rows = WatchRows()
    assert not rows.open
    rows.apply({"id": 1, "event": "started"})
    rows.apply({"id": 2, "event": "started"})
    assert rows.open == {1, 2}
    rows.apply({"id": 1, "event": "finished", "ttft_ms": 40.0})
    assert rows.open == {2}
    rows.apply({"id": 2, "event": "finished"})
    assert not rows.open
    rows.apply({"id": 3})  # a line without an event is a finished request: never opened
    assert not rows.open


def test_the_agent_reads_the_gpu_only_while_a_client_streams() -> None:
    import asyncio

    from llmtop.servers.agent.server import Agent

    agent = Agent("http://127.0.0.1:1", interval_s=1.0)
    assert agent.sampler.measuring is False  # nobody listening: the slow beat
    agent._streams.add(asyncio.Queue(1))
    assert agent.sampler.measuring is True
