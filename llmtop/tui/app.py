"""The llmtop TUI: stream a prompt with live latency numbers next to a live probe panel.

Throttling (the monitor must not be the noise): stream events only append to a
`LiveRequest` and set its dirty flags; probe samples only replace `_probe_sample`. While a
request streams, frames follow its chunks (`StreamFrames`, llmtop.tui.state.frames): a frame at
most every 0.5 s, drawn in the wake-up of the chunk that finds it due, with the text, the
live numbers and the probe panel (at most every PANEL_MIN_NS) in it, the first chunk (TTFT)
at once, and a fallback deadline when the stream stalls. Otherwise one
`set_interval(1 / RENDER_HZ)` timer draws what is dirty (the end's final figures at the
next tick, probe samples, history picks). With nothing left to draw, or a request streaming,
the timer is paused; `_wake` resumes it, so an idle TUI spends nothing on ticks.

Frames, not tokens, are what the monitor spends: on a 2-core machine a Textual frame costs
2–6 ms of CPU, most of it fixed (every widget whose container overlaps the change is rendered
again from its cache), and a screen layout ~13 ms. So nothing asks for a layout while text
streams or keys are typed (`TokenPane`, `ProbePanel`, `QuietStatic`, `PromptInput`), and a
scroll, which repaints the whole token pane, happens in jumps. Probes are sampled in the
`ProbeSampler` thread (every `settings.probe_interval_s`, 2 s, while idle; every 1 s from
a request's start, and once more as it ends: its figures cover the request's last stretch),
logged there, and posted as coalescing `ProbeSampled` messages; each NOISY one is kept by a
`NoiseTracker`, which marks the request it fell in, or ended ("⚠ machine NOISY during this
request") here and on the bench screen.

What it costs (bench/tui_cost.py: the real TUI in a pty at 120×40, a fresh TUI per request,
CPU summed over its threads' scheduler run time; 2 cores, load average < 0.7, 2026-11-30):
streaming at 50 tok/s (--scripted), 20 s windows, the tree before these changes 7.4–7.8 %
of a core, with frames following the chunks, `SparkBars` and probes every 1 s 6.4–7.0 %, with
frames at 2 Hz 5.8–6.0 % (the default bench's 6 s window: 8.0 → 6.8 %); idle 0.6–0.7 % (10 s
from 5 s after start-up; before, the same). Of the streaming figure ~2.5 % (2–3.1 %) is the
HTTP client alone (the same request streamed headless), 0.55–0.65 % the probe sampler,
~0.35 % Textual's input and output threads; the rest is the main thread: ~0.5 % of a core
per frame a second and its wake-ups (~55 a second: 50 chunks, Textual's screen timer after
each frame, a probe sample, the panel's age check; a wake-up costs ~0.2 ms here, and py-spy
puts half of the main thread's CPU in the epoll wait). Idle (a 20 s census per thread):
0.67 %: the main thread 0.28 % (2.5 wake-ups a second), Textual's input thread 0.18 %
(its 10 Hz poll), the probes 0.20 %. Where it goes: `bench/tui_cost.py --py-spy`.

The session (`SessionState`): every finished request joins it; the TTFT sparkline across
requests (`SessionStrip`) and the history (`RequestHistory`, F2) are drawn from it by the same
timer, only when its `version` or the request on screen changed. Enter on a history row puts
that request on screen (`viewing`) until the next prompt.

Ctrl+B opens the bench screen (`llmtop.tui.screens.bench`): `llmtop bench`'s protocol on this
connection, after stopping any request still streaming here.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import socket
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar

from textual import work
from textual.app import ComposeResult, ScreenStackError, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Input
from textual.worker import Worker

from llmtop.connect import connect, descendants
from llmtop.engines.base import EngineError
from llmtop.engines.connection import Connection
from llmtop.engines.events import Failure, FailureKind, StreamEvent, exit_code_for
from llmtop.exitcodes import STOP_SIGNALS, ExitCode, signal_exit_code
from llmtop.probes.engine_identity import is_local_host
from llmtop.probes.remote import AgentSampler, make_sampler
from llmtop.probes.sampler import ProbeSample, ProbeSampler
from llmtop.sessions.measure.request import RequestCollector, RequestResult
from llmtop.sessions.records.log import LogError, read_log
from llmtop.sessions.records.schema import BenchMarkRecord, RequestRecord
from llmtop.sessions.reports.formats import render
from llmtop.sessions.reports.run import build
from llmtop.sessions.runners.bench_config import BenchConfig
from llmtop.sessions.runners.curves import CurveStore, curve_key
from llmtop.sessions.runners.energy import EnergyMeter, no_sources
from llmtop.sessions.runners.environment import PROBE_INTERVAL_S as BENCH_PROBE_INTERVAL_S
from llmtop.sessions.runners.recorder import SessionRecorder
from llmtop.sessions.runners.warmup import started_engine, warm_up
from llmtop.stamping.rxstamps import use_reader_threads
from llmtop.tui.messages import ProbeSampled, ProbeStateChanged
from llmtop.tui.screens.apps import AppsScreen
from llmtop.tui.screens.bench import BenchScreen, LastBench
from llmtop.tui.screens.help import HelpScreen
from llmtop.tui.screens.load import LoadScreen
from llmtop.tui.screens.plots import PlotsScreen
from llmtop.tui.screens.report import ReportScreen
from llmtop.tui.screens.sessions import SessionsScreen
from llmtop.tui.state.connect_failure import connect_failure_view
from llmtop.tui.state.fmt import saved_where
from llmtop.tui.state.frames import StreamFrames
from llmtop.tui.state.live import LiveRequest
from llmtop.tui.state.noise import NoiseTracker
from llmtop.tui.state.prefill import PrefillExpectation, expectation_for
from llmtop.tui.state.session_state import SessionState
from llmtop.tui.state.settings import TuiSettings
from llmtop.tui.widgets.apps_view import ENGINE_STARTING, ENGINE_UNKNOWN
from llmtop.tui.widgets.header_line import HeaderLine
from llmtop.tui.widgets.machine_badge import MachineBadge
from llmtop.tui.widgets.metrics_strip import MetricsStrip
from llmtop.tui.widgets.probe_panel import ProbePanel
from llmtop.tui.widgets.prompt_input import HELP_CHARACTER, PromptInput
from llmtop.tui.widgets.request_history import RequestHistory
from llmtop.tui.widgets.scrollbars import LlmtopBaseApp
from llmtop.tui.widgets.session_strip import SessionStrip
from llmtop.tui.widgets.token_pane import TokenPane

# Frame rates, from bench/tui_cost.py on 2 cores (a real TUI in a pty at 50 tok/s): a frame
# costs Textual 2–6 ms of CPU and each one a second ~0.5 % of a core (wake-ups included):
# text at 10 Hz and numbers at 5 Hz cost ~15 % of a core, text at 4 Hz with numbers at 2 Hz
# 7.0 %, text and numbers together at 2 Hz 6.0 %. While a request streams the frames follow
# its chunks (`StreamFrames`: a frame in the wake-up of the chunk that finds one due, ≥ 0.5 s
# apart; the first chunk and the end at once); the render timer draws the rest (the end,
# probe samples, keys) and is paused meanwhile.
RENDER_HZ = 8  # the render timer: nothing is drawn more often than this
TERMINAL_CHECK_S = 1.0  # how often the app checks that its terminal is still there
PREFILL_TICK_S = 0.5  # while the prefill of a predicted prompt runs, its wait is redrawn this often
TEXT_EVERY = 2  # streamed text: every 2nd tick; every stream frame is a text tick
NUMBERS_EVERY = 2  # live numbers, sparklines, history: every 2nd tick, so in every stream
# frame (a multiple of TEXT_EVERY: numbers and text share a frame)
STREAM_PROBE_INTERVAL_S = 1.0  # probe samples while a request streams (the NOISY marks come
# from these), and one more as it ends (END_SAMPLE_S); idle, every `settings.probe_interval_s`
# (2 s), when faster. A sample costs ~2.5 ms of CPU, ~20 ms when it looks the engine's pids
# up (every 5 s while streaming): the sampler thread took 0.7–1.1 % of a core at 0.5 s and
# 0.55–0.65 % at 1 s (bench/tui_cost.py, 2 cores, 50 tok/s)
END_SAMPLE_S = 0.001  # the interval that makes the sampler thread sample at once: asked for
# as a request ends; the sample's callback (`_on_probe_thread`) then sets the idle one back
PANEL_MIN_NS = 1_000_000_000  # the probe panel: at most once a second, however fast the
# probes sample: drawing the panel cost more than taking the sample (bench/tui_cost.py)
IDLE_PIDS_REUSE_NS = 30 * 10**9  # idle, the engine's pids are looked up at most every 30 s
# (by socket owner: ~20 ms of CPU, every 5 s otherwise — a third of the idle CPU)
SHUTDOWN_WAIT_S = 5.0
MAIN_SCREEN_ACTIONS = frozenset({"history", "keep_history", "repeat"})  # see check_action
# The screen at every size: below NARROW_BELOW columns the response and its figures
# get the width and the probe panel gives way to a one-line badge (`MachineBadge`; at 80
# columns the 46-column panel left the answer 32); from WIDE_FROM the panel widens (a quarter
# of the screen, llmtop.tcss) and, as tall as the screen is, lists more apps and the CPU
# history (`ProbePanel`). Textual sets the class on the screen as its width crosses them.
NARROW_BELOW = 100
WIDE_FROM = 200
# Below SHORT_BELOW lines, the history (F2, the whole width under the panes, at most 30 % of
# the height) takes the place of the TTFT-per-request strip, which shows the same requests'
# TTFT: at 80x24 the response keeps 3 lines, not none.
SHORT_BELOW = 30


class LlmtopApp(LlmtopBaseApp):
    """The TUI. Build it with `make_app`; `run()` returns an `ExitCode` value."""

    CSS_PATH = "llmtop.tcss"
    TITLE = "llmtop"
    HORIZONTAL_BREAKPOINTS = [  # noqa: RUF012 — App declares it without ClassVar (mypy)
        (0, "-narrow"),
        (NARROW_BELOW, "-normal"),
        (WIDE_FROM, "-wide"),
    ]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (SHORT_BELOW, "-tall")]  # noqa: RUF012 — as above
    BINDINGS: ClassVar[list[BindingType]] = [
        # every screen's key in the footer, short enough for 80 columns;
        # Ctrl+R and Esc are in the prompt's placeholder; README's "Keys" line and the help
        # (F1) name them all
        Binding("ctrl+r", "repeat", "Repeat", priority=True, show=False),
        Binding("ctrl+b", "bench", "Bench", priority=True),
        Binding("ctrl+g", "plots", "Plots", priority=True),
        Binding("ctrl+o", "sessions", "Sessions", priority=True),
        Binding("ctrl+l", "load", "Load", priority=True),
        Binding("ctrl+k", "keep_history", "Keep history", priority=True, show=False),
        Binding("question_mark", "help", "Help", show=False),
        Binding("f1", "help", "Help"),
        Binding("f2", "history", "History"),
        Binding("f3", "apps", "Apps"),
        Binding("escape", "stop", "Stop", show=False),
        Binding("slash", "focus_prompt", "Prompt", show=False),
        # no plain "q": every printable key is the prompt's (TokenPane.TypedAhead), so a
        # prompt typed after Esc never quits the app
        # quit is not a screen: off the footer, which then holds every screen's key at 80
        # columns (F3 made it overflow); the help, the palette and the README name Ctrl+Q
        Binding("ctrl+q", "quit", "Quit", priority=True, show=False),
        # Ctrl+C stops a streaming request, as Esc does (Textual's own Ctrl+C only showed
        # "Do you want to quit? Press ctrl+q", the stream going on); idle, that hint
        Binding("ctrl+c", "interrupt", "Stop", priority=True, show=False),
    ]

    def __init__(self, settings: TuiSettings, connection: Connection | None = None) -> None:
        super().__init__()  # whole-cell scrollbars (LlmtopBaseApp)
        self.settings = settings
        self._injected = connection
        self.conn: Connection | None = None
        self.recorder: SessionRecorder | None = None
        self.sampler: ProbeSampler | AgentSampler | None = None
        self.energy: EnergyMeter | None = None  # this machine's sources (with the probes)
        self.live: LiveRequest | None = None
        self.session = SessionState()
        self.viewing: LiveRequest | None = None  # a past request picked in the history
        self.last_prompt: str | None = None
        self.keep_history = False  # Ctrl+K: each prompt continues the conversation
        self.chat: list[dict[str, str]] = []  # the conversation so far (user, assistant, …)
        self.connect_failure: EngineError | LogError | None = None
        self._pending: str | None = None
        self._stream_lock = asyncio.Lock()  # one request at a time, even across cancellation
        self._stream_worker: Worker[None] | None = None
        self._probe_sample: ProbeSample | None = None
        self._probe_dirty = False
        self._end_sample_for: LiveRequest | None = None  # the request ended, its sample not in
        self.noise = NoiseTracker()
        self.last_bench: LastBench | None = None  # BenchScreen leaves its last run here
        self._frame = 0  # render timer ticks
        self._panel_ns = -PANEL_MIN_NS  # when the probe panel was last drawn (monotonic_ns)
        self._render_timer: Timer | None = None  # paused while there is nothing to draw
        self._tty_fd: int | None = None  # the terminal checked by _check_terminal
        self._ticking = True  # the render timer runs (paused idle and while streaming)
        self._paused = False  # idle with everything drawn
        self._frames = StreamFrames(self._stream_frame)  # frames while a request streams
        self._pids: tuple[int, set[int]] | None = None  # (monotonic_ns, pids) last looked up
        self._closed = False
        self.exit_code = ExitCode.OK
        # Once connected, move every object made so far (Textual, the widgets, the engine's
        # client: ~110k) out of the garbage collector's reach: a full collection then scans
        # only what came later (86 ms of CPU per full collection while streaming, ~0 after;
        # bench/tui_cost.py). The terminal app sets it (`main`); tests, which build many apps
        # in one process, do not.
        self.freeze_gc_when_ready = False

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield HeaderLine(id="header")
        with Horizontal(id="main"):
            with Vertical(id="left"):
                yield TokenPane(id="tokens")
                yield MetricsStrip(id="metrics")
                yield SessionStrip(id="session")
                yield MachineBadge(id="machine-badge")  # narrow screens: the panel in a line
            yield ProbePanel(id="probes")
        yield RequestHistory(id="history")  # the whole width: every figure and the prompt
        yield PromptInput(
            placeholder="prompt — Enter sends, Ctrl+R repeats, Esc stops, F2 history, F1 help",
            id="prompt",
            # coming back to the box (Tab, "/", a key typed in the response pane) keeps what
            # is in it: selected, the next key would replace it
            select_on_focus=False,
        )
        yield Footer(compact=True)

    def _check_terminal(self) -> None:
        """Exit with ExitCode.HANGUP once the terminal llmtop started on is gone (a hung-up
        tty is no longer a tty: isatty's tcgetattr fails with EIO)."""
        if self._tty_fd is not None and not os.isatty(self._tty_fd):
            self._tty_fd = None
            self.exit_code = ExitCode.HANGUP  # main() returns it
            self.exit()

    def on_mount(self) -> None:
        self.query_one(HeaderLine).show_starting(self.settings.engine)
        self.query_one(TokenPane).show_message(
            "starting engine… (the embedded engine takes a few seconds)"
        )
        prompt = self.query_one("#prompt", Input)
        prompt.cursor_blink = False  # a blinking cursor repaints twice a second, forever
        prompt.focus()
        self.query_one(RequestHistory).display = False  # F2 shows it
        self._render_timer = self.set_interval(1 / RENDER_HZ, self._render_dirty, name="render")
        # A terminal that went away (its window closed without a SIGHUP reaching llmtop: tmux
        # kill-server, a dropped ssh) leaves Textual's input thread reading EOF in a loop at a
        # core's worth of CPU: look once a second, and leave as on SIGHUP.
        stdin = sys.__stdin__
        self._tty_fd = stdin.fileno() if stdin is not None and stdin.isatty() else None
        if self._tty_fd is not None:
            self.set_interval(TERMINAL_CHECK_S, self._check_terminal, name="terminal")
        if self.settings.probes:
            # this machine's energy sources, sampled with the probes (an agent's machine:
            # none); the session log records them, the metrics strip shows a request's J/token
            self.energy = EnergyMeter(None if self.settings.agent is None else no_sources())
            self.sampler = make_sampler(
                self.settings.agent,
                self.settings.probe_interval_s,
                self._on_probe_thread,
                engine_pids=self._engine_pids,
                thresholds=self.settings.thresholds,
                on_state=self._on_probe_state_thread,
                energy=self.energy.reader,
                engine_threads=self._engine_threads,
                thread_setting=lambda: None if self.conn is None else self.conn.thread_setting,
            )
            self.sampler.start()
        self.query_one(ProbePanel).engine_unknown = ENGINE_STARTING
        self._label_probes()
        self._connect()

    # ------------------------------------------------------------------ engine

    @work(exclusive=True, group="connect")
    async def _connect(self) -> None:
        """Connect (or start the embedded engine) without blocking the UI."""
        s = self.settings
        try:
            conn = self._injected or await connect(
                s.engine, s.host, s.model, s.model_path, s.via, s.relay_url, s.engine_pids
            )
        except EngineError as exc:
            self.connect_failure = exc
            self.exit_code = exit_code_for(exc.failure.kind)
            view = connect_failure_view(exc.failure.kind)  # "no engine" only when none answered
            self.query_one(HeaderLine).show_failed(view.header)
            self.query_one(ProbePanel).engine_unknown = "n/a (no engine)"
            self.query_one(TokenPane).show_failure(exc.failure, view.title)
            return
        except Exception as exc:  # noqa: BLE001 — unforeseen: say so, stay usable to quit
            failure = Failure(
                FailureKind.PROTOCOL,
                f"connecting failed unexpectedly: {type(exc).__name__}: {exc}",
                "retry with --engine embedded, or report this with the session log",
            )
            self.connect_failure = EngineError(failure)
            self.exit_code = ExitCode.ENGINE_UNREACHABLE
            self.query_one(HeaderLine).show_failed("no engine")
            self.query_one(ProbePanel).engine_unknown = "n/a (no engine)"
            self.query_one(TokenPane).show_failure(failure, "")
            return
        if self._closed:  # quit while the engine was starting
            await conn.close()
            return
        self.conn = conn
        self.query_one(ProbePanel).engine_unknown = ENGINE_UNKNOWN
        self._probe_dirty = True  # the engine line: no longer "starting…"
        self._label_probes()
        header = self.query_one(HeaderLine)
        header.show_connection(conn)
        warmup_ms = None
        if started_engine(conn):  # a fresh embedded engine: load the model before request 1
            self.query_one(TokenPane).show_message(
                "loading the model (a load-only request, not measured)…")
            warmup_ms = await warm_up(conn, s.options)
            if self._closed:  # quit while the model loaded: _close_session closed conn
                return
        try:
            self.recorder = SessionRecorder(conn, s.options, s.log_path,
                                            energy=self._energy_for(conn),
                                            token_timeout_s=s.token_timeout_s)
        except LogError as exc:
            self.connect_failure = exc
            self.exit_code = ExitCode.USAGE
            self.query_one(TokenPane).show_message(
                f"✗ {exc}\n→ pass a writable file with --log", "bold red"
            )
            return
        header.show_log(str(self.recorder.log.path))
        loaded = ("" if warmup_ms is None else
                  f" (the engine loaded the model in {warmup_ms:,.0f} ms first, not measured)")
        self.query_one(TokenPane).show_message(
            f"ready{loaded} — type a prompt below and press Enter.")
        if self.freeze_gc_when_ready:
            gc.freeze()  # see `freeze_gc_when_ready`
        if self._pending is not None:
            prompt, self._pending = self._pending, None
            self.send(prompt)

    def _energy_for(self, conn: Connection) -> EnergyMeter | None:
        """The energy meter for a connection: the sampled one when the engine runs here,
        else one that reads nothing and says why; None without probes."""
        if self.energy is None:
            return None
        if self.settings.agent is None and is_local_host(conn.upstream.host):
            return self.energy
        return EnergyMeter(remote_host=conn.upstream.host)

    @property
    def ready(self) -> bool:
        """True once connected and the session log is open."""
        return self.recorder is not None and not self._closed

    # ------------------------------------------------------------------ requests

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in the main prompt sends it; another screen's box is not a prompt (the load
        screen's "1,2" reached here and was sent as a prompt)."""
        if event.input.id != "prompt" or event.input.screen is not self.default_screen:
            return
        event.input.clear()
        self.send(event.value)

    def send(self, prompt: str) -> None:
        """Send `prompt` (cancelling a request still streaming); queue it while connecting."""
        prompt = prompt.strip()
        if not prompt:
            return
        if self.connect_failure is not None:
            self.notify("no engine: see the message in the response pane", severity="error")
            return
        if self.bench_screen is not None:
            self.notify("the bench screen is open: Esc returns to the prompt")
            return
        self.last_prompt = prompt
        if not self.ready:
            self._pending = prompt
            self.notify("engine still starting; the prompt will be sent when it is ready")
            return
        self._stream_worker = self._stream(prompt)

    @work(exclusive=True, group="stream")
    async def _stream(self, prompt: str) -> None:
        """Stream one request. Exclusive: starting another cancels this one, which is then
        recorded as cancelled before the next request starts (the lock orders them)."""
        async with self._stream_lock:
            recorder = self.recorder
            if recorder is None:
                return
            live: LiveRequest | None = None

            def on_start(collector: RequestCollector) -> None:
                nonlocal live
                said = " ".join([*(m["content"] for m in history), prompt])
                live = self.live = LiveRequest(collector, expected=self._expected(said))
                if live.expected is not None:
                    self._watch_prefill(live)
                self.viewing = None
                self._wake()  # frames follow the stream until it ended, then the timer draws
                self._set_probe_interval(streaming=True)

            def on_event(event: StreamEvent) -> None:
                assert live is not None
                live.add(event)
                self._frames.changed(live.urgent)

            def on_end(result: RequestResult, _record: RequestRecord) -> None:
                assert live is not None
                live.energy = tuple(recorder.last_energy)
                self._sample_at_end(live)
                self._ended(result, live)
                if self.keep_history and result.status == "ok":
                    self.chat += [{"role": "user", "content": prompt},
                                  {"role": "assistant", "content": result.content}]

            history = tuple(self.chat) if self.keep_history else ()
            await recorder.measure(prompt, on_event, on_start=on_start, on_end=on_end,
                                   history=history)

    def _expected(self, prompt: str) -> PrefillExpectation | None:
        """The saved prefill curve's prediction for `prompt` on this model (None without)."""
        conn = self.conn
        if conn is None:
            return None
        key = curve_key(conn.engine.name, conn.engine.host, conn.model)
        return expectation_for(CurveStore().load(key), prompt)

    def _watch_prefill(self, live: LiveRequest) -> None:
        """Until its first chunk, redraw the wait beside the prediction every PREFILL_TICK_S
        (the only clock read for it: the wait is set on the live state, which draws it)."""
        def tick() -> None:
            if not live.waiting_for_prefill or self.live is not live:
                timer.stop()
                return
            if live.collector.sent_ns:
                live.waited_ms = (time.perf_counter_ns() - live.collector.sent_ns) / 1e6
                live.numbers_dirty = True
                self._frames.changed()
        timer = self.set_interval(PREFILL_TICK_S, tick, name="prefill-wait")

    def _ended(self, result: RequestResult, live: LiveRequest) -> None:
        """Show a logged request's end; a log that cannot be written is reported on screen
        (the numbers are still shown) rather than ending the app."""
        live.finish(result)
        live.mark_noisy(self.noise.first_during(*live.span_ns))
        self.session.add(live)
        self._wake()
        assert self.recorder is not None
        incomplete = self.recorder.log.incomplete
        if incomplete is not None and self.exit_code != ExitCode.LOG_INCOMPLETE:
            self.exit_code = ExitCode.LOG_INCOMPLETE  # said once; later records are counted
            self.notify(incomplete, title="session log incomplete", severity="error", timeout=30)

    def _sample_at_end(self, live: LiveRequest) -> None:
        """The request ended: one probe sample now, which measures its last stretch (since
        the sample before, ≤ STREAM_PROBE_INTERVAL_S) and counts for it (`on_probe_sampled`);
        then the idle interval. An agent samples at its own pace: only the idle interval."""
        if isinstance(self.sampler, ProbeSampler):
            self._end_sample_for = live
            self.sampler.set_interval(END_SAMPLE_S)  # wakes the thread: it samples at once
        else:
            self._set_probe_interval(streaming=False)

    def _set_probe_interval(self, streaming: bool) -> None:
        if streaming:
            self._end_sample_for = None
        if self.sampler is not None:
            idle = self.settings.probe_interval_s
            self.sampler.set_interval(min(idle, STREAM_PROBE_INTERVAL_S) if streaming else idle)

    @property
    def streaming(self) -> bool:
        """True while a request is streaming."""
        return self.live is not None and self.live.streaming

    # ------------------------------------------------------------------ probes

    def _engine_pids(self) -> set[int]:
        """Runs in the sampler thread: the measured engine's pids (`Connection.engine_pids`),
        which the probes leave out of the other apps. While the render timer is paused (idle
        on the main screen, everything drawn) the last answer is reused for up to
        IDLE_PIDS_REUSE_NS; otherwise — a request streaming, the bench or the load screen
        open — every sample asks the connection (which looks them up at most every 5 s).
        Before the connection is made, llmtop's own child processes: the engine (or relay)
        it is starting, whose start-up turned the first frames NOISY as "python -m llmtop
        started since the last sample"."""
        conn = self.conn
        if conn is None:
            return descendants([os.getpid()])
        now = time.monotonic_ns()
        last = self._pids
        if last is None or not self._paused or now - last[0] > IDLE_PIDS_REUSE_NS:
            last = self._pids = (now, conn.engine_pids)
        return last[1]

    def _engine_threads(self) -> int | None:
        """Runs in the sampler thread: the engine's compute threads (the requests' num_thread,
        else the embedded engine's default; None before connecting or when unknown)."""
        conn = self.conn
        return None if conn is None else conn.compute_threads(self.settings.options)

    def _on_probe_thread(self, sample: ProbeSample) -> None:
        """Runs in the sampler thread: log the sample, then hand it to the event loop. The
        sample asked for at a request's end (`_sample_at_end`) is handed on as that request's
        and sets the idle interval back, before the thread waits for its next sample."""
        recorder = self.recorder
        if recorder is not None:
            with contextlib.suppress(LogError):
                recorder.record_probe(sample)
        ends = self._end_sample_for
        sampler = self.sampler
        if ends is not None and sampler is not None and sampler.interval_s == END_SAMPLE_S:
            self._end_sample_for = None
            self._set_probe_interval(streaming=False)
        else:
            ends = None
        with contextlib.suppress(RuntimeError):  # the loop may be closing
            self.post_message(ProbeSampled(sample, ends))

    def _on_probe_state_thread(self, state: str, detail: str) -> None:
        """Runs in the agent reader's thread: log the change, relabel the panel."""
        recorder = self.recorder
        if recorder is not None:
            with contextlib.suppress(LogError):
                recorder.record_probe_state(state, detail)
        with contextlib.suppress(RuntimeError):  # the loop may be closing
            self.post_message(ProbeStateChanged())

    def on_probe_state_changed(self, _: ProbeStateChanged) -> None:
        self._probe_dirty = True  # the next frame redraws the title with the machine's name
        self._wake()

    def _label_probes(self) -> None:
        """Name the machine the probe panel shows (`probe_label`)."""
        with contextlib.suppress(NoMatches):
            self.query_one(ProbePanel).label = self.probe_label()

    def probe_label(self) -> str:
        """The probe panel's title: the agent's machine (`--probes`), or, when the engine is
        on another machine and no agent is given, that this machine is not the engine's."""
        sampler = self.sampler
        if isinstance(sampler, AgentSampler):
            if sampler.state == "connected":
                return f"engine's machine: {sampler.machine} (agent)"
            return f"agent {sampler.target.url}: {sampler.state}"
        if self.conn is None or self._injected is not None:  # an injected one: a test's fake
            return "machine"
        return machine_label(self.conn.upstream.host)

    def on_probe_sampled(self, message: ProbeSampled) -> None:
        self._probe_sample = message.sample
        self._probe_dirty = True
        self._wake()
        live = self.live
        ends = message.ends if isinstance(message.ends, LiveRequest) else None
        if not self.noise.add(message.sample, ends.span_ns[0] if ends else None):
            return
        # the request streaming now, the last one ended and the one this sample ended: a
        # sample taken during one may arrive after the next one started
        recent = {id(r): r for r in (live, *self.session.requests[-1:], ends) if r is not None}
        for request in recent.values():
            self.session.mark_noisy(request, self.noise.first_during(*request.span_ns))

    @property
    def latest_probe(self) -> ProbeSample | None:
        """The latest probe sample received (the bench screen draws it too)."""
        return self._probe_sample

    # ------------------------------------------------------------------ rendering

    def _render_dirty(self) -> None:
        """The only place streamed text and probe samples reach widgets (≤ RENDER_HZ)."""
        # while the app shuts down its widgets, then its screens, are gone: nothing to draw on
        with contextlib.suppress(NoMatches, ScreenStackError):
            self._render_widgets()

    @property
    def shown(self) -> LiveRequest | None:
        """The request on screen: the one picked in the history, else the latest."""
        return self.viewing or self.live

    def _render_widgets(self) -> None:
        self._frame += 1
        live = self.shown
        urgent = live is not None and live.urgent  # first chunk or the end: draw now
        if live is not None:
            self._render_live(live, urgent)
        on_main = self.screen is self.default_screen  # not under help or the bench screen
        settled = on_main and not self.streaming and not (live and live.dirty)
        if on_main and (urgent or settled or self._frame % NUMBERS_EVERY == 0):
            self.query_one(SessionStrip).sync(self.session, live)  # no-op unless it changed
            history = self.query_one(RequestHistory)
            if history.display:
                history.sync(self.session)
        self._render_probes(aligned=not self.streaming or self._frame % TEXT_EVERY == 0)
        if self.streaming:
            self._tick(False)  # the frames follow the stream's chunks (`_stream_frame`)
        elif settled and not (live and live.numbers_dirty) and not self._probe_pending:
            self._tick(False)
            self._paused = True  # nothing left to draw: no ticks until `_wake`

    def _stream_frame(self, stalled: bool) -> None:
        """A frame while a request streams (`StreamFrames`): a text tick, so the text, every
        other time the numbers, and a waiting probe sample are drawn in it; when the stream
        `stalled` (no chunk came), a numbers tick: everything that waits is drawn."""
        every = NUMBERS_EVERY if stalled else TEXT_EVERY
        self._frame = (self._frame // every + 1) * every - 1  # the tick (+1) is a multiple
        self._render_dirty()
        shown = self.shown
        if self.streaming and (self._probe_pending or (shown and shown.numbers_dirty)):
            self._frames.changed()  # left for a later frame: drawn then even if no chunk comes

    def _render_live(self, live: LiveRequest, urgent: bool) -> None:
        """The request on screen: its text every TEXT_EVERY-th tick, its numbers every
        NUMBERS_EVERY-th (both on the same ticks: one frame), either at once when urgent."""
        if live.dirty and (urgent or self._frame % TEXT_EVERY == 0):
            live.dirty = False
            self.query_one(TokenPane).show_live(live)
        if live.numbers_dirty and (urgent or self._frame % NUMBERS_EVERY == 0):
            live.numbers_dirty = live.urgent = False
            number = self.session.number_of(live)
            word = "" if number is None else self.session.word(number)
            self.query_one(MetricsStrip).show_live(live, self.session.previous(live), word)

    @property
    def _probe_pending(self) -> bool:
        """A probe sample (or a new panel title) waits to be drawn on the main screen."""
        return self._probe_dirty and self._probe_sample is not None and self.bench_screen is None

    def _render_probes(self, aligned: bool) -> None:
        """The probe panel, at most every PANEL_MIN_NS; while a request streams only on a
        text tick (`aligned`), so that the panel shares the text's frame."""
        if not (self._probe_pending and aligned):
            return
        now = time.monotonic_ns()
        if now - self._panel_ns < PANEL_MIN_NS:
            return
        assert self._probe_sample is not None
        self._probe_dirty = False
        self._panel_ns = now
        self._label_probes()
        self.query_one(ProbePanel).show(self._probe_sample)
        self.query_one(MachineBadge).show(self._probe_sample)

    @property
    def render_paused(self) -> bool:
        """True while the render timer is paused: idle, with everything drawn."""
        return self._paused

    def _wake(self) -> None:
        """Something changed that the render timer draws: resume it (a paused timer ticks at
        once), or while a request streams, let the stream's frames draw it (`StreamFrames`).
        Idle, with nothing to draw, the timer is paused: no ticks, no CPU."""
        self._paused = False
        if self.streaming:
            shown = self.shown
            self._frames.changed(shown is not None and shown.urgent)
        else:
            self._frames.cancel()
            self._tick(True)

    def _tick(self, on: bool) -> None:
        """Resume (`on`) or pause the render timer, when it is not so already."""
        if self._render_timer is not None and self._ticking != on:
            self._ticking = on
            if on:
                self._render_timer.resume()
            else:
                self._render_timer.pause()

    # ------------------------------------------------------------------ keys

    async def on_token_pane_typed_ahead(self, message: TokenPane.TypedAhead) -> None:
        """A key typed in the response pane: into the prompt box, which takes the focus
        ("?" into an empty prompt is the help, as in the box itself; "\r" sends the prompt,
        "\b" deletes the character before the cursor)."""
        prompt = self.query_one("#prompt", PromptInput)
        if message.character == HELP_CHARACTER and not prompt.value:
            self.action_help()
            return
        prompt.focus()
        if message.character == "\r":
            await prompt.action_submit()
        elif message.character == "\b":
            prompt.action_delete_left()
        else:
            prompt.insert_text_at_cursor(message.character)

    def on_prompt_input_help_requested(self, _: PromptInput.HelpRequested) -> None:
        self.action_help()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """F2 (the history), Ctrl+K (the conversation) and Ctrl+R (repeat) belong to the main
        screen: not shown, not run elsewhere (Ctrl+K on the load screen turned the
        conversation on unseen)."""
        if action in MAIN_SCREEN_ACTIONS:
            return self.screen is self.default_screen
        return True

    def action_history(self) -> None:
        """F2: show the request history (focused) or hide it (back to the prompt)."""
        history = self.query_one(RequestHistory)
        history.display = not history.display
        self.screen.set_class(history.display, "-history")
        if history.display:
            history.sync(self.session)
            history.table.move_cursor(row=len(history.rows) - 1)  # the latest request
            history.table.focus()
        else:
            self.action_focus_prompt()

    def on_request_history_selected(self, message: RequestHistory.Selected) -> None:
        """Enter on a history row: put that request's tokens and figures on screen."""
        picked = self.session.requests[message.number - 1]
        self.viewing = None if picked is self.live else picked
        picked.dirty = picked.numbers_dirty = picked.urgent = True
        self._wake()

    def action_keep_history(self) -> None:
        """Ctrl+K: start a conversation (each prompt is sent after the whole history, so the
        context grows every turn) or end it (back to single prompts)."""
        self.keep_history = not self.keep_history
        self.chat = []
        # said on the prompt box for as long as it lasts, not only in a toast, which fades
        self.query_one("#prompt").border_title = (
            "conversation: each prompt follows the whole history · Ctrl+K ends it"
            if self.keep_history else None)
        self.notify("conversation: each prompt is sent after the whole history (Ctrl+K ends "
                    "it)" if self.keep_history else "conversation ended: single prompts again")

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """The command palette (Ctrl+P): llmtop's screens first, then Textual's own, whose
        Screenshot is replaced by `action_save_screenshot` (Textual's saves to ~/Downloads,
        and said only "Failed to save screenshot" where there is none)."""
        yield SystemCommand("Bench", "Ctrl+B: the bench protocol on this engine", self.action_bench)
        yield SystemCommand("History", "F2: this session's requests", self.action_history)
        yield SystemCommand("Apps", "F3: the machine's apps and their processes", self.action_apps)
        yield SystemCommand("Conversation", "Ctrl+K: start or end a conversation",
                            self.action_keep_history)
        yield SystemCommand("Help", "F1: the keys and what each number means", self.action_help)
        yield SystemCommand("Plots", "Ctrl+G: plots of this session", self.action_plots)
        yield SystemCommand("Sessions", "Ctrl+O: the saved session logs", self.action_sessions)
        yield SystemCommand("Load", "Ctrl+L: a concurrency or rate sweep", self.action_load)
        yield SystemCommand("Report", "this session's report so far", self.action_report)
        for command in super().get_system_commands(screen):
            if command.title != "Screenshot":
                yield command
        yield SystemCommand(
            "Screenshot",
            "Save an SVG of the screen beside the session log (else here)",
            self.action_save_screenshot,
        )

    def action_save_screenshot(self) -> None:
        """Save an SVG of the screen in the session log's folder (the working directory before
        there is a log), and say where — or why it could not be written."""
        folder = Path.cwd() if self.recorder is None else self.recorder.log.path.parent
        try:
            path = self.save_screenshot(path=str(folder))
        except OSError as exc:
            self.notify(
                f"screenshot not saved in {folder}: {exc.strerror or exc}",
                title="Screenshot",
                severity="error",
                timeout=10,
                markup=False,  # a folder's "[" is a name, not markup
            )
            return
        self.notify(saved_where(path), title="Screenshot saved", timeout=10, markup=False)

    def action_report(self) -> None:
        """The report of this session's log so far (as `llmtop report LOG`), in a box."""
        if self.recorder is None:
            self.notify("no session log yet")
            return
        path = str(self.recorder.log.path)
        try:
            text = render(build(read_log(path)), "md")
        except (LogError, ValueError) as exc:
            self.notify(f"no report: {exc}", severity="error")
            return
        self.push_screen(ReportScreen(text, path, title="session report"))

    def action_repeat(self) -> None:
        """Send the last prompt again."""
        if self.last_prompt is None:
            self.notify("nothing to repeat yet")
            return
        self.send(self.last_prompt)

    def action_apps(self) -> None:
        """F3: every app of the latest probe sample, the selected one's processes."""
        if not isinstance(self.screen, AppsScreen):
            self.push_screen(AppsScreen(self.latest_probe))

    def action_help(self) -> None:
        """Show the keys and metric definitions."""
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    @property
    def bench_screen(self) -> BenchScreen | None:
        """The bench screen when it is open (it may be under a help screen)."""
        return next((s for s in self.screen_stack if isinstance(s, BenchScreen)), None)

    async def action_bench(self) -> None:
        """Ctrl+B: stop the request streaming here, then open the bench screen."""
        if self.screen is not self.default_screen:
            return
        if self.connect_failure is not None:
            self.notify("no engine: see the message in the response pane", severity="error")
            return
        if not self.ready or self.conn is None or self.recorder is None:
            self.notify("the engine is still starting; try again when it is ready")
            return
        self._pending = None
        worker = self._stream_worker
        if worker is not None and not worker.is_finished:
            worker.cancel()  # recorded as cancelled, as Esc would
            with contextlib.suppress(Exception):
                await asyncio.wait_for(worker.wait(), SHUTDOWN_WAIT_S)
        await self.push_screen(BenchScreen(self, self.conn, str(self.recorder.log.path)))

    def action_plots(self) -> None:
        """The plots screen of this session's log so far."""
        if self.recorder is None:
            self.notify("no session log yet")
            return
        self.push_screen(PlotsScreen(str(self.recorder.log.path)))

    def action_sessions(self) -> None:
        """The saved logs, in the folder of this session's log (else the default one)."""
        folder = () if self.recorder is None else (str(self.recorder.log.path.parent),)
        self.push_screen(SessionsScreen(folder))

    async def action_load(self) -> None:
        """Ctrl+L: the load screen (concurrency / rate sweeps) on this connection."""
        if self.screen is not self.default_screen or self.conn is None or not self.ready:
            self.notify("the load screen opens from the prompt once the engine is ready")
            return
        worker = self._stream_worker
        if worker is not None and not worker.is_finished:
            self.notify("a request is streaming: Esc stops it first")
            return
        await self.push_screen(LoadScreen(self.conn, self.settings))

    def bench_started(self, log_path: str, config: BenchConfig) -> None:
        """A bench began: point the session log at its log; probe as during a request."""
        self._session_record(BenchMarkRecord("start", log_path, bench=config.to_dict()))
        if self.sampler is not None:
            self.sampler.set_interval(min(self.settings.probe_interval_s, BENCH_PROBE_INTERVAL_S))

    def bench_ended(self, log_path: str, how: str) -> None:
        """A bench ended (`how`: its verdict, "cancelled" or "failed")."""
        self._session_record(BenchMarkRecord("end", log_path, outcome=how))
        self._set_probe_interval(streaming=False)
        self._probe_dirty = True  # the main panel was not drawn meanwhile
        self._wake()

    def _session_record(self, record: BenchMarkRecord) -> None:
        if self.recorder is not None:
            with contextlib.suppress(LogError):
                self.recorder.log.write(record)

    def action_stop(self) -> None:
        """Esc: cancel the streaming request, or leave the prompt box when idle."""
        if self.streaming:
            self.workers.cancel_group(self, "stream")
        else:
            self.query_one(TokenPane).focus()

    def action_interrupt(self) -> None:
        """Ctrl+C: cancel the streaming request; idle, say how to quit."""
        if self.streaming:
            self.workers.cancel_group(self, "stream")
        else:
            self.notify("Ctrl+Q quits (Ctrl+C stops a streaming request)", markup=False)

    def action_focus_prompt(self) -> None:
        """Back to the prompt box."""
        self.query_one("#prompt", Input).focus()

    async def action_quit(self) -> None:
        """Cancel (and record) a streaming request, close everything, exit."""
        await self._close_session()
        self.exit(int(self.exit_code))

    # ------------------------------------------------------------------ shutdown

    async def _close_session(self) -> None:
        """Idempotent: cancel the stream (recorded as cancelled), stop probes, close the log,
        close the connection (stopping the embedded engine)."""
        if self._closed:
            return
        self._closed = True
        bench = self.bench_screen
        if bench is not None:
            await bench.cancel_bench()  # the runner records the interruption, closes its log
        worker = self._stream_worker
        if worker is not None and not worker.is_finished:
            worker.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(worker.wait(), SHUTDOWN_WAIT_S)
        if self.sampler is not None:
            await asyncio.to_thread(self.sampler.stop)
        if self.recorder is not None:
            with contextlib.suppress(LogError):
                self.recorder.close()
        if self.conn is not None:
            await self.conn.close()

    async def on_unmount(self) -> None:
        await self._close_session()


def machine_label(engine_host: str) -> str:
    """The probe panel's title without an agent: "machine" when the engine at `engine_host`
    runs here, else a plain statement that the panel shows this machine, not the engine's."""
    if is_local_host(engine_host):
        return "machine"
    return f"this machine ({socket.gethostname()}), not the engine's ({engine_host})"


def make_app(settings: TuiSettings, connection: Connection | None = None) -> LlmtopApp:
    """Build the TUI from plain settings (the CLI and tests).

    connection: an already-connected engine (tests inject a scripted one); None = connect
    per `settings.engine` on mount. The app owns the connection either way and closes it.
    """
    return LlmtopApp(settings, connection)


def main(settings: TuiSettings) -> int:
    """`llmtop` with no command: run the TUI until the user quits; returns an ExitCode value
    (USAGE without a terminal: scripts use `llmtop run` or `llmtop bench`)."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print(
            "llmtop: the interactive app needs a terminal (stdin and stdout are not one); "
            "for scripts use `llmtop run --prompt TEXT` or `llmtop bench`",
            file=sys.stderr,
        )
        return int(ExitCode.USAGE)
    # the app's loop spends 5-15 ms per frame: sockets are read by threads of their own, or a
    # first chunk read late is dated at the next one (stamping/rxstamps.py, "Who reads")
    use_reader_threads()
    app = make_app(settings)
    app.freeze_gc_when_ready = True
    received: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        # SIGTERM/SIGHUP quit as the quit key does: on_unmount records the stream as cancelled
        # and stops the engine. The handler runs on the app's own (main) thread.
        received.append(signum)
        with contextlib.suppress(RuntimeError):  # no loop yet: nothing to stop
            asyncio.get_running_loop().call_soon_threadsafe(app.exit)

    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        code = app.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    said = session_said(app)
    if said:  # where the session went, as `run` says it
        with contextlib.suppress(OSError):  # the terminal may be gone (a hang-up): EIO
            print(said, file=sys.stderr)
    if received:
        print(f"llmtop: stopped by {signal.Signals(received[0]).name}", file=sys.stderr)
        return signal_exit_code(received[0])
    return int(code if code is not None else app.exit_code)


def session_said(app: LlmtopApp) -> str:
    """The line the TUI leaves on the terminal as it quits: "llmtop: session log PATH (3
    requests: 2 ok, 1 cancelled)"; "" when no log was opened."""
    recorder = app.recorder
    if recorder is None:
        return ""
    rows = [app.session.row(n).status for n in range(1, len(app.session.requests) + 1)]
    counts: dict[str, int] = {}
    for word in rows:
        counts[word] = counts.get(word, 0) + 1
    words = ", ".join(f"{n} {w}" for w, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    many = f"{len(rows)} request{'s' if len(rows) != 1 else ''}"
    return f"llmtop: session log {recorder.log.path} ({many}{': ' + words if words else ''})"


__all__ = ["LlmtopApp", "TuiSettings", "main", "make_app", "session_said"]
