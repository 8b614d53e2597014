"""The main screen: a prompt streamed with live latency numbers beside the probe panel.

Throttling (the monitor must not be the noise): stream events only append to a
`LiveRequest` and set its dirty flags; probe samples only mark the panel dirty. Frames, not
tokens, are what the monitor spends: a Textual frame costs milliseconds of CPU, most of it
fixed (every widget whose container overlaps the change is rendered again from its cache),
and a screen layout several times that (docs/performance.md, "The TUI's frames"). So the
frames are scheduled (`FrameClock`, llmtop.tui.state.frames): while a request streams they
follow its chunks, a frame at most every 0.5 s, drawn in the wake-up of the chunk that finds
it due, with the text, the live numbers and the probe panel (at most every PANEL_MIN_NS) in
it, the first chunk (TTFT) at once, and a fallback deadline when the stream stalls;
otherwise one render timer (at most RENDER_HZ) draws what is dirty (the end's final figures,
probe samples, history picks), and is paused once nothing is left to draw, so an idle screen
spends nothing on ticks. Nothing asks for a layout while text streams or keys are typed
(`TokenPane`, `ProbePanel`, `QuietStatic`, `PromptInput`), and a scroll, which repaints the
whole token pane, happens in jumps. A NOISY probe sample is kept by the app's
`NoiseTracker`, which marks the request it fell in, or ended ("⚠ machine NOISY during this
request") here and on the bench screen.

The session (`SessionState`): every finished request joins it; the TTFT sparkline across
requests (`SessionStrip`) and the history (`RequestHistory`, F2) are drawn from it in the same
frames, only when its `version` or the request on screen changed. Enter on a history row puts
that request on screen (`viewing`) until the next prompt.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from textual.app import ComposeResult, ScreenStackError
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Input
from textual.worker import Worker

from llmtop.tui.messages import ProbeSampled
from llmtop.tui.screens.later import LaterParts
from llmtop.tui.state.frames import FrameClock
from llmtop.tui.state.live import LiveRequest
from llmtop.tui.state.session_state import SessionState
from llmtop.tui.widgets.apps_view import ENGINE_STARTING, ENGINE_UNKNOWN
from llmtop.tui.widgets.header_line import HeaderLine
from llmtop.tui.widgets.metrics_strip import MetricsStrip
from llmtop.tui.widgets.probe_panel import ProbePanel
from llmtop.tui.widgets.prompt_input import HELP_CHARACTER, PromptInput
from llmtop.tui.widgets.session_strip import SessionStrip
from llmtop.tui.widgets.token_pane import TokenPane

if TYPE_CHECKING:  # the bench screen's module is imported when it opens
    from collections.abc import Sequence

    from llmtop.engines.connection import Connection
    from llmtop.engines.discovery import FoundEngine
    from llmtop.engines.events import Failure, StreamEvent
    from llmtop.engines.live_state import EngineState
    from llmtop.probes.sampler import ProbeSample  # psutil, the probes: after the first frame
    from llmtop.sessions.measure.request import RequestCollector, RequestResult
    from llmtop.sessions.records.request import RequestRecord  # pydantic: with the log
    from llmtop.tui.link import EngineLink
    from llmtop.tui.screens.bench import BenchScreen
    from llmtop.tui.state.noise import NoiseTracker
    from llmtop.tui.widgets.request_history import RequestHistory

# Frame rates: each frame a second costs ~0.5 % of a core on 2 cores, so text and numbers
# share their frames, twice a second while a request streams (docs/performance.md, "The
# TUI's frames").
RENDER_HZ = 8  # the render timer: nothing is drawn more often than this
PREFILL_TICK_S = 0.5  # while the prefill of a predicted prompt runs, its wait is redrawn this often
TEXT_EVERY = 2  # streamed text: every 2nd tick; every stream frame is a text tick
NUMBERS_EVERY = 2  # live numbers, sparklines, history: every 2nd tick, so in every stream
# frame (a multiple of TEXT_EVERY: numbers and text share a frame)
PANEL_MIN_NS = 1_000_000_000  # the probe panel: at most once a second, however fast the
# probes sample: drawing the panel costs more than taking the sample
# The latest probe samples kept for a request's offload check (at the streaming pace of one
# a second, a request's last four minutes; a median over them is its figure)
RECENT_SAMPLES = 256
SHUTDOWN_WAIT_S = 5.0  # how long a cancelled request may take to be recorded


class MainHost(Protocol):
    """What the main screen needs from the app (`LlmtopApp` provides it): the engine side,
    the noise marks, the latest probe sample, whether the bench screen is open, the help."""

    link: EngineLink
    noise: NoiseTracker

    @property
    def latest_probe(self) -> ProbeSample | None: ...

    @property
    def bench_screen(self) -> BenchScreen | None: ...

    def log_incomplete(self, why: str) -> None: ...

    def action_help(self) -> None: ...


class MainScreen(Screen[None]):
    """The response, its live figures, the session's TTFT strip and the probe panel, the
    history (F2) and the prompt. The app's main-screen keys call its public methods."""

    def __init__(self, host: MainHost) -> None:
        super().__init__()
        self.host = host
        self.live: LiveRequest | None = None
        self.session = SessionState()
        self.viewing: LiveRequest | None = None  # a past request picked in the history
        self.last_prompt: str | None = None
        self.keep_history = False  # Ctrl+K: each prompt continues the conversation
        self.chat: list[dict[str, str]] = []  # the conversation so far (user, assistant, …)
        self.pending: str | None = None  # a prompt sent before the engine was ready
        self._stream_lock = asyncio.Lock()  # one request at a time, even across cancellation
        self._stream_worker: Worker[None] | None = None
        self._probe_dirty = False
        self._recent: deque[ProbeSample] = deque(maxlen=RECENT_SAMPLES)  # for `_check_offload`
        self._panel_ns = -PANEL_MIN_NS  # when the probe panel was last drawn (monotonic_ns)
        self.clock = FrameClock(self._stream_frame)
        self.later = LaterParts(self, self._engine_state)  # mounted after the first frame

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        # What the first frame shows; what is hidden until a key or a narrow screen asks for
        # it, the strips' rows and the footer are mounted just after it, into the lines kept
        # for them (`later.py`): every widget is styled and laid out before the first frame,
        # and these 31 of 42 cost ~15 % of it (bench/tui_start_instructions.py).
        yield HeaderLine(id="header")
        with Horizontal(id="main"):
            with Vertical(id="left"):
                yield TokenPane(id="tokens")
                yield MetricsStrip(id="metrics")
                yield SessionStrip(id="session")
            yield ProbePanel(id="probes")
        yield PromptInput(
            placeholder="prompt — Enter sends, Ctrl+R repeats, Esc stops, F2 history, F1 help",
            id="prompt",
            # coming back to the box (Tab, "/", a key typed in the response pane) keeps what
            # is in it: selected, the next key would replace it
            select_on_focus=False,
        )
        yield Vertical(id="footer-slot")  # the footer's row, kept from the first frame on

    def on_mount(self) -> None:
        self.query_one(HeaderLine).show_starting(self.host.link.settings.engine)
        self.query_one(TokenPane).show_message(
            "starting engine… (the embedded engine takes a few seconds)"
        )
        prompt = self.query_one("#prompt", Input)
        prompt.cursor_blink = False  # a blinking cursor repaints twice a second, forever
        prompt.focus()
        self.clock.start(self.set_interval(1 / RENDER_HZ, self._render_dirty, name="render"))
        self.query_one(ProbePanel).engine_unknown = ENGINE_STARTING

    # ------------------------------------------------------------------ the connection

    def show_no_engine(self, failure: Failure, header: str, title: str) -> None:
        """No engine: the failure in the response pane, `header` in the header line."""
        self.query_one(HeaderLine).show_failed(header)
        self.query_one(ProbePanel).engine_unknown = "n/a (no engine)"
        self.later.engine_panel.attach(None)
        self.query_one(TokenPane).show_failure(failure, title)

    def show_connected(self, conn: Connection) -> None:
        """Connected: the engine in the header, the panel's engine line no longer
        "starting…"."""
        self.query_one(ProbePanel).engine_unknown = ENGINE_UNKNOWN
        self._probe_dirty = True
        self.label_probes()
        self.query_one(HeaderLine).show_connection(conn)
        self.later.engine_panel.attach(conn)

    def show_switching(self, what: str) -> None:
        """The engine picked in the picker (F5) is being connected: `what` in the header and
        the response pane; the engine panel reads nothing until it is; the session starts
        afresh (`new_session`)."""
        self.query_one(HeaderLine).show_starting(what)
        self.later.engine_panel.attach(None)
        self.new_session()
        self.query_one(TokenPane).show_message(f"connecting to {what}…")

    def new_session(self) -> None:
        """Another engine is measured (F5): its own session, as its own session log is.
        The TTFT median and n, the previous request's TPOT, the sparklines and the history
        describe one log, so one engine: mixed, they set one engine's TTFT beside another's
        (a median over both, "prev" of the other engine, `c` comparing across them). The
        earlier engine's requests stay in its log (Ctrl+O opens it)."""
        self.session = SessionState()
        self.live = self.viewing = None
        self.query_one(MetricsStrip).clear()
        self.later.history.clear()
        self.query_one(SessionStrip).sync(self.session, None)
        self._wake()

    def show_message(self, text: str, style: str = "dim") -> None:
        """A line in the response pane (a start-up step, or why the session cannot start)."""
        self.query_one(TokenPane).show_message(text, style)

    def show_ready(self, log_path: Path, warmup_ms: float | None) -> None:
        """The session log is open: its path in the header, "ready" in the response pane
        (with the model's load time when a fresh embedded engine loaded it, not measured)."""
        self.query_one(HeaderLine).show_log(str(log_path))
        loaded = ("" if warmup_ms is None else
                  f" (the engine loaded the model in {warmup_ms:,.0f} ms first, not measured)")
        self.query_one(TokenPane).show_message(
            f"ready{loaded} — type a prompt below and press Enter.")

    def send_pending(self) -> None:
        """Send the prompt typed while the engine was starting, if any."""
        if self.pending is not None:
            prompt, self.pending = self.pending, None
            self.send(prompt)

    # ------------------------------------------------------------------ requests

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in the prompt box sends it (another box on this screen is not a prompt)."""
        if event.input.id != "prompt":
            return
        event.input.clear()
        self.send(event.value)

    def send(self, prompt: str) -> None:
        """Send `prompt` (cancelling a request still streaming); queue it while connecting."""
        prompt = prompt.strip()
        if not prompt:
            return
        link = self.host.link
        if link.connect_failure is not None:
            self.notify("no engine: see the message in the response pane", severity="error")
            return
        if self.host.bench_screen is not None:
            self.notify("the bench screen is open: Esc returns to the prompt")
            return
        self.last_prompt = prompt
        if not link.ready:
            self.pending = prompt
            self.notify("engine still starting; the prompt will be sent when it is ready")
            return
        # The app's worker, not the screen's: a quit cancels it and waits for its record
        # after the screens are gone. Exclusive: a new prompt cancels the stream still running.
        self._stream_worker = self.app.run_worker(
            self._stream(prompt), name="_stream", group="stream", exclusive=True)

    async def _stream(self, prompt: str) -> None:
        """Stream one request. A cancelled one is recorded as cancelled before the next
        request starts (the lock orders them)."""
        async with self._stream_lock:
            recorder = self.host.link.recorder
            if recorder is None:
                return
            live: LiveRequest | None = None

            def on_start(collector: RequestCollector) -> None:
                nonlocal live
                said = " ".join([*(m["content"] for m in history), prompt])
                live = self.live = LiveRequest(collector,
                                                expected=self.host.link.prefill_expected(said))
                if live.expected is not None:
                    self._watch_prefill(live)
                self.viewing = None
                self._wake()  # frames follow the stream until it ended, then the timer draws
                self.host.link.set_probe_interval(streaming=True)
                self.later.engine_panel.request_started()

            def on_event(event: StreamEvent) -> None:
                assert live is not None
                live.add(event)
                self.clock.stream.changed(live.urgent)

            def on_end(result: RequestResult, _record: RequestRecord) -> None:
                assert live is not None
                live.energy = tuple(recorder.last_energy)
                self.host.link.sample_at_end(live)
                self._ended(result, live)
                if self.keep_history and result.status == "ok":
                    self.chat += [{"role": "user", "content": prompt},
                                  {"role": "assistant", "content": result.content}]

            history = tuple(self.chat) if self.keep_history else ()
            await recorder.measure(prompt, on_event, on_start=on_start, on_end=on_end,
                                   late=self.host.link.throttle_edges(), history=history)

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
                self.clock.stream.changed()
        timer = self.set_interval(PREFILL_TICK_S, tick, name="prefill-wait")

    def _ended(self, result: RequestResult, live: LiveRequest) -> None:
        """Show a logged request's end; a log that cannot be written is reported on screen
        (the numbers are still shown) rather than ending the app."""
        live.finish(result)
        live.mark_noisy(self.host.noise.first_during(*live.span_ns))
        decode = result.metrics.client_decode_tps if result.status == "ok" else None
        self.later.engine_panel.request_ended(decode)
        self.session.add(live)
        self._wake()
        assert self.host.link.recorder is not None
        incomplete = self.host.link.recorder.log.incomplete
        if incomplete is not None:
            self.host.log_incomplete(incomplete)

    @property
    def streaming(self) -> bool:
        """True while a request is streaming."""
        return self.live is not None and self.live.streaming

    @property
    def stream_running(self) -> bool:
        """True while the stream's worker runs (a request, or its record being written)."""
        worker = self._stream_worker
        return worker is not None and not worker.is_finished

    async def cancel_stream(self) -> None:
        """Cancel the request still streaming, if any, and wait (at most SHUTDOWN_WAIT_S)
        until it is recorded as cancelled, as Esc would."""
        worker = self._stream_worker
        if worker is not None and not worker.is_finished:
            worker.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(worker.wait(), SHUTDOWN_WAIT_S)

    # ------------------------------------------------------------------ probes

    def probe_sampled(self, message: ProbeSampled) -> None:
        """A probe sample (the app keeps it as the latest): drawn in a coming frame; a NOISY
        one marks the requests it fell in."""
        self._probe_dirty = True
        self._wake()
        live = self.live
        ends = message.ends if isinstance(message.ends, LiveRequest) else None
        self._recent.append(message.sample)
        if ends is not None and ends.result is not None:
            self.app.run_worker(self._offload(ends, message.sample), group="offload",
                                exit_on_error=False)  # a finding lost, never the app
        noise = self.host.noise
        if not noise.add(message.sample, ends.span_ns[0] if ends else None):
            return
        # the request streaming now, the last one ended and the one this sample ended: a
        # sample taken during one may arrive after the next one started
        recent = {id(r): r for r in (live, *self.session.requests[-1:], ends) if r is not None}
        for request in recent.values():
            self.session.mark_noisy(request, noise.first_during(*request.span_ns))

    async def _offload(self, live: LiveRequest, end: ProbeSample) -> None:
        """A request's end sample came: its samples against the engine's GPU claim
        (`EngineLink.offload`); a finding is drawn under its figures, as its NOISY mark is."""
        if await self.host.link.offload(live, self._recent, end):
            live.numbers_dirty = True
            self._wake()

    def probes_changed(self) -> None:
        """The panel's title changed (an agent's state, the bench's end): redraw the panel."""
        self._probe_dirty = True  # the next frame redraws the title with the machine's name
        self._wake()

    def label_probes(self) -> None:
        """Name the machine the probe panel shows (`EngineLink.probe_label`)."""
        with contextlib.suppress(NoMatches):
            self.query_one(ProbePanel).label = self.host.link.probe_label()

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
        self.clock.advance()
        live = self.shown
        urgent = live is not None and live.urgent  # first chunk or the end: draw now
        if live is not None:
            self._render_live(live, urgent)
        on_main = self.app.screen is self  # not under help or the bench screen
        settled = on_main and not self.streaming and not (live and live.dirty)
        if on_main and (urgent or settled or self.clock.due(NUMBERS_EVERY)):
            self.query_one(SessionStrip).sync(self.session, live)  # no-op unless it changed
            if self.later.whole and (history := self.later.history).display:
                history.sync(self.session)
        self._render_probes(aligned=not self.streaming or self.clock.due(TEXT_EVERY))
        if self.streaming:
            self.clock.hold()  # the frames follow the stream's chunks (`_stream_frame`)
        elif settled and not (live and live.numbers_dirty) and not self._probe_pending:
            self.clock.rest()  # nothing left to draw: no ticks until `_wake`

    def _stream_frame(self, stalled: bool) -> None:
        """A frame while a request streams (`StreamFrames`): a text tick, so the text, every
        other time the numbers, and a waiting probe sample are drawn in it; when the stream
        `stalled` (no chunk came), a numbers tick: everything that waits is drawn."""
        self.clock.align(NUMBERS_EVERY if stalled else TEXT_EVERY)
        self._render_dirty()
        shown = self.shown
        if self.streaming and (self._probe_pending or (shown and shown.numbers_dirty)):
            self.clock.stream.changed()  # left for a later frame: drawn then if no chunk comes

    def _render_live(self, live: LiveRequest, urgent: bool) -> None:
        """The request on screen: its text every TEXT_EVERY-th tick, its numbers every
        NUMBERS_EVERY-th (both on the same ticks: one frame), either at once when urgent."""
        if live.dirty and (urgent or self.clock.due(TEXT_EVERY)):
            live.dirty = False
            self.query_one(TokenPane).show_live(live)
        if live.numbers_dirty and (urgent or self.clock.due(NUMBERS_EVERY)):
            live.numbers_dirty = live.urgent = False
            number = self.session.number_of(live)
            word = "" if number is None else self.session.word(number)
            self.query_one(MetricsStrip).show_live(live, self.session.previous(live), word)

    @property
    def _probe_pending(self) -> bool:
        """A probe sample (or a new panel title) waits to be drawn on this screen."""
        return (self._probe_dirty and self.host.latest_probe is not None
                and self.host.bench_screen is None)

    def _render_probes(self, aligned: bool) -> None:
        """The probe panel, at most every PANEL_MIN_NS; while a request streams only on a
        text tick (`aligned`), so that the panel shares the text's frame."""
        if not (self._probe_pending and aligned):
            return
        now = time.monotonic_ns()
        if now - self._panel_ns < PANEL_MIN_NS:
            return
        sample = self.host.latest_probe
        assert sample is not None
        self._probe_dirty = False
        self._panel_ns = now
        self.label_probes()
        self.query_one(ProbePanel).show(sample)
        if self.later.whole:
            self.later.badge.show(sample)

    @property
    def render_paused(self) -> bool:
        """True while the render timer is paused: idle, with everything drawn."""
        return self.clock.paused

    def _wake(self) -> None:
        """Something changed that is to be drawn: the render timer resumes, or while a
        request streams, the stream's frames draw it (`FrameClock.wake`)."""
        shown = self.shown
        self.clock.wake(self.streaming, shown is not None and shown.urgent)

    # ------------------------------------------------------------------ keys

    async def on_token_pane_typed_ahead(self, message: TokenPane.TypedAhead) -> None:
        """A key typed in the response pane: into the prompt box, which takes the focus
        ("?" into an empty prompt is the help, as in the box itself; "\\r" sends the prompt,
        "\\b" deletes the character before the cursor)."""
        prompt = self.query_one("#prompt", PromptInput)
        if message.character == HELP_CHARACTER and not prompt.value:
            self.host.action_help()
            return
        prompt.focus()
        if message.character == "\r":
            await prompt.action_submit()
        elif message.character == "\b":
            prompt.action_delete_left()
        else:
            prompt.insert_text_at_cursor(message.character)

    def on_prompt_input_help_requested(self, _: PromptInput.HelpRequested) -> None:
        self.host.action_help()

    def toggle_history(self) -> None:
        """F2: show the request history (focused) or hide it (back to the prompt)."""
        history = self.later.history
        history.display = not history.display
        self.set_class(history.display, "-history")
        if history.display:
            history.sync(self.session)
            history.table.move_cursor(row=len(history.rows) - 1)  # the latest request
            history.table.focus()
        else:
            self.focus_prompt()

    def on_request_history_selected(self, message: RequestHistory.Selected) -> None:
        """Enter on a history row: put that request's tokens and figures on screen."""
        picked = self.session.requests[message.number - 1]
        self.viewing = None if picked is self.live else picked
        picked.dirty = picked.numbers_dirty = picked.urgent = True
        self._wake()

    def toggle_engine_panel(self) -> None:
        """F4: show the engine's own figures (read every second while shown) or hide them;
        on a short screen the panel takes the TTFT strip's place (llmtop.tcss, "-engine")."""
        self.set_class(self.later.engine_panel.toggle(), "-engine")

    def show_other_engines(self, others: Sequence[FoundEngine]) -> None:
        """The other engines that answer here (the picker, F5, offers them)."""
        self.later.engine_panel.set_others(others)

    def _engine_state(self, state: EngineState) -> None:
        """A changed reading of the engine's own figures: into the session log, with the
        request streaming as it was read."""
        live = self.live
        self.host.link.record_engine_state(
            state, live.collector.request_id if live is not None and live.streaming else None)

    def toggle_conversation(self) -> None:
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

    def repeat(self) -> None:
        """Send the last prompt again."""
        if self.last_prompt is None:
            self.notify("nothing to repeat yet")
            return
        self.send(self.last_prompt)

    def stop(self) -> None:
        """Esc: cancel the streaming request, or leave the prompt box when idle."""
        if self.streaming:
            self.workers.cancel_group(self.app, "stream")
        else:
            self.query_one(TokenPane).focus()

    def interrupt(self) -> None:
        """Ctrl+C: cancel the streaming request; idle, say how to quit."""
        if self.streaming:
            self.workers.cancel_group(self.app, "stream")
        else:
            self.notify("Ctrl+Q quits (Ctrl+C stops a streaming request)", markup=False)

    def focus_prompt(self) -> None:
        """Back to the prompt box."""
        self.query_one("#prompt", Input).focus()


__all__ = ["MainHost", "MainScreen"]
