"""The TUI's engine side, shared by every screen: the connection, the session log it writes,
the probe sampler and this machine's energy meter.

Probes are sampled in the `ProbeSampler` thread (every `settings.probe_interval_s`, 2 s, while
idle; every STREAM_PROBE_INTERVAL_S from a request's start, and once more as it ends: that
sample's figures cover the request's last stretch), logged there, and posted to the app as
coalescing `ProbeSampled` messages. While idle the GPU and the energy sources are read only
on the sampler's slow beat (every IDLE_GPU_BEAT_S, 5 s, probes/sampler.py). What a sample
and a pid look-up cost, and so why the paces below, is in docs/performance.md ("The TUI's
frames").
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from textual.message import Message

from llmtop.tui.messages import ProbeSampled, ProbeStateChanged

if TYPE_CHECKING:  # the agent's client (httpx), the energy meter, the session log and its
    # records (pydantic), the probes (psutil): imported as the probes start and the log
    # opens, after the first frame (`app.preload` loads them in a thread meanwhile); the
    # engine's and the request's types, where a request or a connection first needs them
    from llmtop.engines.base import EngineError
    from llmtop.engines.connection import Connection
    from llmtop.engines.live_state import EngineState
    from llmtop.probes.remote import AgentSampler
    from llmtop.probes.sampler import ProbeSample, ProbeSampler
    from llmtop.sessions.measure.request import RequestResult
    from llmtop.sessions.records.log import LogError
    from llmtop.sessions.records.schema import BenchMarkRecord, ProbeRecord
    from llmtop.sessions.runners.energy import EnergyMeter
    from llmtop.sessions.runners.recorder import RequestFields, SessionRecorder
    from llmtop.sessions.runners.throttles import ThrottleEdges
    from llmtop.tui.state.live import LiveRequest
    from llmtop.tui.state.prefill import PrefillExpectation
    from llmtop.tui.state.settings import TuiSettings

# While a request streams the probes sample this often (the NOISY marks come from these), and
# once more as it ends; idle, every `settings.probe_interval_s` when that is faster. A sample
# costs a few ms of CPU, and a pid look-up ten times that: faster paces cost the sampler
# thread a visible share of a core.
STREAM_PROBE_INTERVAL_S = 1.0
# The interval that makes the sampler thread sample at once: asked for as a request ends; the
# sample's callback (`_on_probe_thread`) then sets the idle one back.
END_SAMPLE_S = 0.001
# Idle, the engine's pids are looked up at most this often: a look-up by socket owner costs
# ~20 ms of CPU, which at the connection's own pace (every 5 s) was a third of the idle CPU.
IDLE_PIDS_REUSE_NS = 30 * 10**9


def machine_label(engine_host: str) -> str:
    """The probe panel's title without an agent: "machine" when the engine at `engine_host`
    runs here, else a plain statement that the panel shows this machine, not the engine's."""
    from llmtop.probes.engine_identity import is_local_host

    if is_local_host(engine_host):
        return "machine"
    return f"this machine ({socket.gethostname()}), not the engine's ({engine_host})"


class EngineLink:
    """The connection to the engine and what lives as long as the app: the session log the
    main screen's requests are recorded in, the probe sampler (its threads' callbacks, its
    pace around requests and benches) and this machine's energy meter; closed once, in order.

    settings: the TUI's settings; connection: an already-connected engine (tests inject a
    scripted one), else `connect` connects per `settings.engine`; post: the app's thread-safe
    `post_message`, which the sampler's threads post their samples with; idle: True while the
    main screen has nothing left to draw (the engine's pids are then reused). Not a Textual
    object: the app shows what it does.
    """

    def __init__(
        self,
        settings: TuiSettings,
        connection: Connection | None,
        post: Callable[[Message], object],
        idle: Callable[[], bool],
    ) -> None:
        self.settings = settings
        self.injected = connection
        self._post = post
        self._idle = idle
        self.conn: Connection | None = None
        self.recorder: SessionRecorder | None = None
        self.sampler: ProbeSampler | AgentSampler | None = None
        self.energy: EnergyMeter | None = None  # this machine's sources (with the probes)
        self.connect_failure: EngineError | LogError | None = None  # shown on the screen
        self.closing = False  # set once as the app begins to close: nothing opens after it
        self._end_sample_for: LiveRequest | None = None  # the request ended, its sample not in
        self._pids: tuple[int, set[int]] | None = None  # (monotonic_ns, pids) last looked up
        self._throttles: ThrottleEdges | None = None  # made at the first request, kept

    # ------------------------------------------------------------------ connection

    async def connect(self) -> Connection | None:
        """The injected connection, else one made per the settings (Ollama when it answers,
        else the embedded engine started); None when the app began closing meanwhile (the
        connection is closed then). Raises `EngineError` when no engine answers or one fails
        to start; anything else unforeseen is the caller's to report."""
        from llmtop.connect import connect  # after the first frame: see `preload`

        s = self.settings
        conn = self.injected or await connect(
            s.engine, s.host, s.model, s.model_path, s.via, s.relay_url, s.engine_pids
        )
        if self.closing:  # quit while the engine was starting
            await conn.close()
            return None
        self.conn = conn
        return conn

    def open_log(self, conn: Connection) -> SessionRecorder:
        """Open the session log for `conn` (`settings.log_path`); raises `LogError` when it
        cannot be written."""
        from llmtop.sessions.runners.recorder import SessionRecorder

        s = self.settings
        self.recorder = SessionRecorder(conn, s.options, s.log_path,
                                        energy=self._energy_for(conn),
                                        token_timeout_s=s.token_timeout_s)
        return self.recorder

    def _energy_for(self, conn: Connection) -> EnergyMeter | None:
        """The energy meter for a connection: the sampled one when the engine runs here,
        else one that reads nothing and says why; None without probes."""
        if self.energy is None:
            return None
        from llmtop.probes.engine_identity import is_local_host

        if self.settings.agent is None and is_local_host(conn.upstream.host):
            return self.energy
        from llmtop.sessions.runners.energy import EnergyMeter

        return EnergyMeter(remote_host=conn.upstream.host)

    @property
    def ready(self) -> bool:
        """True once connected and the session log is open, until the app closes."""
        return self.recorder is not None and not self.closing

    def mark(self, record: BenchMarkRecord) -> None:
        """Write a bench's start or end into the session log (a log that cannot be written
        already says so on screen)."""
        if self.recorder is not None:
            with contextlib.suppress(log_error()):
                self.recorder.log.write(record)

    async def close(self) -> None:
        """Stop the probes, close the log, close the connection (stopping the embedded
        engine). The app cancels what still streams first."""
        if self.sampler is not None:
            await asyncio.to_thread(self.sampler.stop)
        if self.recorder is not None:
            with contextlib.suppress(log_error()):
                self.recorder.close()
        if self.conn is not None:
            await self.conn.close()

    # ------------------------------------------------------------------ probes

    def start_probes(self) -> None:
        """With the probes on (`settings.probes`): this machine's energy sources, sampled
        with the probes (an agent's machine: none; the session log records them, the metrics
        strip shows a request's J/token), and the sampler thread, started."""
        s = self.settings
        if not s.probes:
            return
        from llmtop.sessions.runners.energy import EnergyMeter, no_sources

        self.energy = EnergyMeter(None if s.agent is None else no_sources())
        from llmtop.probes.remote import make_sampler

        self.sampler = make_sampler(
            s.agent,
            s.probe_interval_s,
            self._on_probe_thread,
            engine_pids=self._engine_pids,
            thresholds=s.thresholds,
            on_state=self._on_probe_state_thread,
            energy=self.energy.reader,
            engine_threads=self._engine_threads,
            thread_setting=lambda: None if self.conn is None else self.conn.thread_setting,
        )
        self._measuring(False)  # nothing measured yet: the GPU on the sampler's slow beat
        self.sampler.start()

    def _measuring(self, on: bool) -> None:
        """Whether the sampler reads the GPU (and the energy sources) in every sample: on
        from a request's or a bench's start until its end sample, else at the slow beat
        (sampler.IDLE_GPU_BEAT_S), so an open TUI does not keep an idle GPU awake. An
        agent's sampler paces its own machine."""
        from llmtop.probes.sampler import ProbeSampler

        if isinstance(self.sampler, ProbeSampler):
            self.sampler.set_measuring(on)

    def set_probe_interval(self, streaming: bool) -> None:
        """The probes' pace: STREAM_PROBE_INTERVAL_S (or the idle one, when faster) while a
        request streams, the idle one otherwise."""
        if streaming:
            self._end_sample_for = None
        self._measuring(streaming)
        if self.sampler is not None:
            idle = self.settings.probe_interval_s
            self.sampler.set_interval(min(idle, STREAM_PROBE_INTERVAL_S) if streaming else idle)

    def sample_at_end(self, live: LiveRequest) -> None:
        """The request ended: one probe sample now, which measures its last stretch (since
        the sample before, ≤ STREAM_PROBE_INTERVAL_S) and counts for it (`ProbeSampled.ends`);
        then the idle interval. An agent samples at its own pace: only the idle interval."""
        from llmtop.probes.sampler import ProbeSampler

        if isinstance(self.sampler, ProbeSampler):
            self._end_sample_for = live
            self.sampler.set_interval(END_SAMPLE_S)  # wakes the thread: it samples at once
        else:
            self.set_probe_interval(streaming=False)

    def probe_for_bench(self) -> None:
        """A bench began: the probes sample as during a request (at the bench's pace when
        the idle one is slower)."""
        self._measuring(True)
        from llmtop.sessions.runners.environment import PROBE_INTERVAL_S as BENCH_PROBE_INTERVAL_S

        if self.sampler is not None:
            self.sampler.set_interval(min(self.settings.probe_interval_s, BENCH_PROBE_INTERVAL_S))

    def probe_label(self) -> str:
        """The probe panel's title: the agent's machine (`--probes`), or, when the engine is
        on another machine and no agent is given, that this machine is not the engine's."""
        from llmtop.probes.remote import AgentSampler

        sampler = self.sampler
        if isinstance(sampler, AgentSampler):
            if sampler.state == "connected":
                return f"engine's machine: {sampler.machine} (agent)"
            return f"agent {sampler.target.url}: {sampler.state}"
        if self.conn is None or self.injected is not None:  # an injected one: a test's fake
            return "machine"
        return machine_label(self.conn.upstream.host)

    def throttle_edges(self) -> Callable[[RequestResult], RequestFields] | None:
        """A request's `late` hook giving its record the throttles at its edges (read now and
        as it ends: runners/throttles.py), when the engine runs on this machine and no agent
        samples another; None otherwise, or without probes."""
        conn = self.conn
        if conn is None or not self.settings.probes or self.settings.agent is not None:
            return None
        from llmtop.probes.engine_identity import is_local_host

        if not is_local_host(conn.upstream.host):
            return None
        if self._throttles is None:
            from llmtop.sessions.runners.throttles import ThrottleEdges

            self._throttles = ThrottleEdges()
        return self._throttles.edges()

    def prefill_expected(self, prompt: str) -> PrefillExpectation | None:
        """The saved prefill curve's prediction for `prompt` on the connected model (None
        without a connection or a saved curve)."""
        conn = self.conn
        if conn is None:
            return None
        from llmtop.sessions.runners.curves import CurveStore, curve_key  # with the first prompt
        from llmtop.tui.state.prefill import expectation_for

        key = curve_key(conn.engine.name, conn.engine.host, conn.model)
        return expectation_for(CurveStore().load(key), prompt)

    def record_engine_state(self, state: EngineState, request_id: int | None) -> None:
        """A reading of the engine's figures that changed, into the session log, tied to the
        request streaming as it was read (None: none); a log that cannot be written already
        says so on screen, so its error is not raised again here."""
        if self.recorder is None:
            return
        from llmtop.sessions.records.log import LogError
        from llmtop.sessions.records.schema import EngineStateRecord

        with contextlib.suppress(LogError):
            self.recorder.log.write(EngineStateRecord.of({**state.to_dict(),
                                                          "request_id": request_id}),
                                    sync=False)

    def _probes_watch_engine(self, conn: Connection) -> bool:
        """Whether the probe samples are of the engine's machine: an agent's (`--probes`), or
        this machine when the engine runs here (an injected connection: a test's fake)."""
        from llmtop.probes.remote import AgentSampler

        if isinstance(self.sampler, AgentSampler):
            return True
        from llmtop.probes.engine_identity import is_local_host

        return self.injected is not None or is_local_host(conn.upstream.host)

    async def offload(self, live: LiveRequest, recent: Iterable[ProbeSample],
                      end: ProbeSample) -> bool:
        """Set `live.offload`, the `offload-mismatch` finding of a request that ended
        (analysis/offload.py): the engine's claim of the model's share in GPU memory against
        the probe samples taken during it (those of `recent` in its span, and its end sample
        `end`), named with its decode rate. The engine is asked (`model_info`: Ollama's
        /api/ps) only when the samples would contradict a model all on the GPU, so a request
        on an agreeing machine costs no call. True when a finding was set; False when the
        probes do not watch the engine's machine, the engine cannot say, or nothing
        contradicts."""
        conn, result = self.conn, live.result
        if conn is None or result is None or not self._probes_watch_engine(conn):
            return False
        start, stop = live.span_ns
        samples = [s for s in recent if s is not end and start <= s.t_ns <= (stop or s.t_ns)]
        records = [r for s in (*samples, end) if (r := _probe_record(s)) is not None]
        from llmtop.sessions.analysis.offload import gpu_share, offload_finding

        m = result.metrics
        rate = m.server_decode_tps or m.client_decode_tps
        server = "llama-server" if (conn.engine_config or {}).get("server") == "llama-server" \
            else "ollama"
        if offload_finding(1.0, records, rate, server) is None:
            return False  # even a claim of all on the GPU would agree: nothing to ask
        try:
            loaded = await conn.upstream.model_info(conn.model)
        except Exception:  # noqa: BLE001 - a check beside the request: losing it loses only
            return False  # the finding, never the app (a worker's error would end it)
        live.offload = offload_finding(gpu_share(loaded.size, loaded.size_vram), records, rate,
                                       server)
        return live.offload is not None

    def _engine_pids(self) -> set[int]:
        """Runs in the sampler thread: the measured engine's pids (`Connection.engine_pids`),
        which the probes leave out of the other apps. While the main screen idles (`idle`:
        everything drawn) the last answer is reused for up to IDLE_PIDS_REUSE_NS; otherwise
        — a request streaming, the bench or the load screen open — every sample asks the
        connection (which looks them up at most every 5 s). Before the connection is made,
        llmtop's own child processes: the engine (or relay) it is starting, whose start-up
        turned the first frames NOISY as "python -m llmtop started since the last sample"."""
        conn = self.conn
        if conn is None:
            from llmtop.connect import descendants

            return descendants([os.getpid()])
        now = time.monotonic_ns()
        last = self._pids
        if last is None or not self._idle() or now - last[0] > IDLE_PIDS_REUSE_NS:
            last = self._pids = (now, conn.engine_pids)
        return last[1]

    def _engine_threads(self) -> int | None:
        """Runs in the sampler thread: the engine's compute threads (the requests' num_thread,
        else the embedded engine's default; None before connecting or when unknown)."""
        conn = self.conn
        return None if conn is None else conn.compute_threads(self.settings.options)

    def _on_probe_thread(self, sample: ProbeSample) -> None:
        """Runs in the sampler thread: log the sample, then hand it to the event loop. The
        sample asked for at a request's end (`sample_at_end`) is handed on as that request's
        and sets the idle interval back, before the thread waits for its next sample."""
        recorder = self.recorder
        if recorder is not None:
            with contextlib.suppress(log_error()):
                recorder.record_probe(sample)
        ends = self._end_sample_for
        sampler = self.sampler
        if ends is not None and sampler is not None and sampler.interval_s == END_SAMPLE_S:
            self._end_sample_for = None
            self.set_probe_interval(streaming=False)
        else:
            ends = None
        with contextlib.suppress(RuntimeError):  # the loop may be closing
            self._post(ProbeSampled(sample, ends))

    def _on_probe_state_thread(self, state: str, detail: str) -> None:
        """Runs in the agent reader's thread: log the change, relabel the panel."""
        recorder = self.recorder
        if recorder is not None:
            with contextlib.suppress(log_error()):
                recorder.record_probe_state(state, detail)
        with contextlib.suppress(RuntimeError):  # the loop may be closing
            self._post(ProbeStateChanged())


def log_error() -> type[Exception]:
    """The session log's write error (`records.log.LogError`), imported when first needed:
    the records (pydantic models) load after the first frame, with the log."""
    from llmtop.sessions.records.log import LogError

    return LogError


def _probe_record(sample: ProbeSample) -> ProbeRecord | None:
    """A sample as the session log reads it back (`decode`: the offload rule reads logged
    probes); None for one the reader would refuse (a figure no measurement can be)."""
    from llmtop.sessions.records.base import RecordError
    from llmtop.sessions.records.schema import ProbeRecord, decode

    try:
        record = decode({"type": "probe", **sample.to_dict()})
    except RecordError:
        return None
    return record if isinstance(record, ProbeRecord) else None


__all__ = ["END_SAMPLE_S", "STREAM_PROBE_INTERVAL_S", "EngineLink", "machine_label"]
