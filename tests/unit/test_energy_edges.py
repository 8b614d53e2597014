"""A request's edge energy readings leave the stream when reading is slow.

NVML's energy counter cost 3.0 ms of CPU a read on an H200 (bench/gpu_check.py): read at the
first token inside the stream, it would stamp the next chunk late by as much. The meter sends
such reads to its worker thread (`EnergyMeter.edge`) and waits for them before any figure
(`settle`). A gated source makes the case exact: its read blocks until the test opens the gate,
so "the hook returned while the read was still under way" is a fact, not a timing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from llmtop.engines.events import StreamEvent
from llmtop.probes.energy import Discovery, Kind, Role, SourceInfo
from llmtop.sessions.runners.energy import EnergyMeter


class GatedCounter:
    """A joule counter that adds 1 J a read; reads block while `gate` is closed."""

    def __init__(self) -> None:
        self.info = SourceInfo("gated", Kind.COUNTER, Role.GPU, "J", 1.0, "a test board", True)
        self.gate = threading.Event()
        self.gate.set()
        self.reading = threading.Event()  # set when a read has started
        self.reads = 0
        self.threads: list[str] = []

    def read(self) -> tuple[float, float | None]:
        self.reading.set()
        self.threads.append(threading.current_thread().name)
        assert self.gate.wait(10), "the test never opened the gate"
        self.reads += 1
        return float(self.reads), None


def first_token_hook(meter: EnergyMeter) -> Callable[[StreamEvent], None]:
    _start, hook = meter.hooks(None)
    assert hook is not None
    return hook


def test_a_slow_edge_read_runs_beside_the_stream_and_every_figure_waits_for_it() -> None:
    source = GatedCounter()
    meter = EnergyMeter(Discovery((source,)), inline_max_ns=-1)  # every edge read is "slow"
    assert meter.reader is not None
    meter.sample()  # the send's edge, read here: 1 sample
    source.gate.clear()
    source.reading.clear()
    first_token_hook(meter)(StreamEvent(t_ns=1, content="x"))  # returns with the read blocked
    assert source.reading.wait(10)
    assert len(meter.reader.samples("gated")) == 1  # the edge read is still under way
    source.gate.set()
    meter.settle()
    samples = meter.reader.samples("gated")
    assert [s.value for s in samples] == [1.0, 2.0]  # the worker's read, in order
    assert source.threads[0] == threading.current_thread().name
    assert source.threads[1].startswith("llmtop-energy")


def test_a_cheap_edge_read_is_taken_where_the_stream_is() -> None:
    source = GatedCounter()  # the gate stays open: a read costs microseconds
    meter = EnergyMeter(Discovery((source,)))
    assert meter.reader is not None
    meter.sample()
    first_token_hook(meter)(StreamEvent(t_ns=1, content="x"))
    # read before the hook returned, on this thread: no worker was needed
    assert [s.value for s in meter.reader.samples("gated")] == [1.0, 2.0]
    assert source.threads == [threading.current_thread().name] * 2


def test_sample_waits_for_pending_edge_reads_so_stamps_stay_in_order() -> None:
    source = GatedCounter()
    meter = EnergyMeter(Discovery((source,)), inline_max_ns=-1)
    assert meter.reader is not None
    meter.sample()
    hook = first_token_hook(meter)
    hook(StreamEvent(t_ns=1, content="x"))
    hook(StreamEvent(t_ns=2, done=True))
    end = meter.sample("end")  # after both edge reads
    samples = meter.reader.samples("gated")
    assert [s.value for s in samples] == [1.0, 2.0, 3.0, 4.0]
    assert [s.t_ns for s in samples] == sorted(s.t_ns for s in samples)
    assert end == samples[-1].t_ns
