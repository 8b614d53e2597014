"""The llmtop TUI: stream a prompt with live latency numbers next to a live probe panel.

The app is the shell: its keys, its stylesheet and screen sizes, the screens it opens, and
what lives as long as it does — the engine side (`EngineLink`: the connection, the session
log, the probes), the noise marks, the latest probe sample, the exit code. What the main
screen shows and how often it draws is `llmtop.tui.screens.main`; what the TUI costs, and the
measurements its rules come from, is docs/performance.md ("The TUI's frames").

Ctrl+B opens the bench screen (`llmtop.tui.screens.bench`): `llmtop bench`'s protocol on this
connection, after stopping any request still streaming here.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual import work
from textual.app import SystemCommand
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.screen import Screen

from llmtop.exitcodes import STOP_SIGNALS, ExitCode, signal_exit_code
from llmtop.tui.base import LlmtopBaseApp
from llmtop.tui.chooser import EngineChooser
from llmtop.tui.link import EngineLink
from llmtop.tui.messages import ProbeSampled, ProbeStateChanged
from llmtop.tui.screens.main import MainScreen
from llmtop.tui.state.noise import NoiseTracker
from llmtop.tui.state.settings import TuiSettings

if TYPE_CHECKING:
    from llmtop.engines.base import EngineError
    from llmtop.engines.connection import Connection
    from llmtop.probes.sampler import ProbeSample
    from llmtop.sessions.measure.config import BenchConfig
    from llmtop.tui.screens.bench import BenchScreen, LastBench

# The first frame (the prompt drawn) waits for nothing it does not show: the other screens,
# the reports (numpy, scipy, ruptures: seconds of imports on 2 cores) and the session log's
# records are imported where they are first used, the connection's modules by the link after
# that frame (bench/tui_start.py measures it; docs/performance.md, "The TUI's first frame").

TERMINAL_CHECK_S = 1.0  # how often the app checks that its terminal is still there
MAIN_SCREEN_ACTIONS = frozenset({"history", "keep_history", "repeat", "engine_panel",
                                 "pick_engine"})  # see check_action
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
    """The TUI. Build it with `make_app`; `run()` returns an `ExitCode` value.

    main_screen: the screen it starts on (under every other); link: the engine side.
    """

    CSS_PATH = "llmtop.tcss"
    TITLE = "llmtop"
    # The main screen is the mode's first screen, installed by name in __init__: mounted
    # (composed) before the app's own on_mount, and the screen the app's queries search.
    MODES: ClassVar[dict[str, str | Callable[[], Screen[Any]]]] = {"main": "main"}
    DEFAULT_MODE: ClassVar[str] = "main"
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
        # off the footer (full at 80 columns); the help and the palette name them
        Binding("f4", "engine_panel", "Engine", show=False),
        Binding("f5", "pick_engine", "Engines", show=False),
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
        self.main_screen = MainScreen(self)
        self.install_screen(self.main_screen, name="main")
        self.link = EngineLink(settings, connection, post=self.post_message,
                               idle=lambda: self.main_screen.render_paused)
        self.noise = NoiseTracker()
        self.latest_probe: ProbeSample | None = None  # every screen draws the latest sample
        self.last_bench: LastBench | None = None  # BenchScreen leaves its last run here
        self._tty_fd: int | None = None  # the terminal checked by _check_terminal
        self.exit_code = ExitCode.OK
        # Once connected, move every object made so far (Textual, the widgets, the engine's
        # client: ~110k) out of the garbage collector's reach: a full collection then scans
        # only what came later (a full collection while streaming cost tens of ms of CPU).
        # The terminal app sets it (`main`); tests, which build many apps in one process, do
        # not.
        self.freeze_gc_when_ready = False
        # The app's loop spends 5-15 ms per frame: the terminal app (`main`) has sockets read
        # by threads of their own, or a first chunk read late is dated at the next one
        # (stamping/rxstamps.py, "Who reads"); set before the first connection is opened,
        # after the first frame (the stamping modules import httpx)
        self.reader_threads = False
        self.chooser = EngineChooser(self)  # the other engines answering here (F5)

    def on_mount(self) -> None:
        # A terminal that went away (its window closed without a SIGHUP reaching llmtop: tmux
        # kill-server, a dropped ssh) leaves Textual's input thread reading EOF in a loop at a
        # core's worth of CPU: look once a second, and leave as on SIGHUP.
        stdin = sys.__stdin__
        self._tty_fd = stdin.fileno() if stdin is not None and stdin.isatty() else None
        if self._tty_fd is not None:
            self.set_interval(TERMINAL_CHECK_S, self._check_terminal, name="terminal")

    def on_ready(self) -> None:
        """The first frame is on the terminal (Textual's Ready): only now the engine side
        starts (`_start_engine_side`), so the prompt is drawn without waiting for it. The
        garbage collector, off until now in the terminal app (cli.py), is on again."""
        gc.enable()
        self._start_engine_side()

    @work(group="start")
    async def _start_engine_side(self) -> None:
        """Mount the rest of the main screen (`later.LaterParts`) while the connection's
        and the probes' modules are imported in a thread (the prompt takes keys meanwhile: a
        prompt typed now is sent once connected), then start the probes and connect
        (`_connect`)."""
        loading = asyncio.ensure_future(asyncio.to_thread(preload))
        with contextlib.suppress(NoMatches):  # quit at once: the screen is gone already
            await self.main_screen.later.mount(self.latest_probe)
        await loading
        if self.link.closing or not self.main_screen.later.whole:
            return
        if self.reader_threads:
            from llmtop.stamping.rxstamps import use_reader_threads

            use_reader_threads()
        self.link.start_probes()
        self.main_screen.label_probes()
        self._connect()

    def _check_terminal(self) -> None:
        """Exit with ExitCode.HANGUP once the terminal llmtop started on is gone (a hung-up
        tty is no longer a tty: isatty's tcgetattr fails with EIO)."""
        if self._tty_fd is not None and not os.isatty(self._tty_fd):
            self._tty_fd = None
            self.exit_code = ExitCode.HANGUP  # main() returns it
            self.exit()

    # ------------------------------------------------------------------ engine

    @work(exclusive=True, group="connect")
    async def _connect(self) -> None:
        """Connect (or start the embedded engine) without blocking the UI; then open the
        session (`_open_session`). A failure is shown and sets the exit code; the app stays
        usable to quit."""
        from llmtop.engines.base import EngineError
        from llmtop.engines.events import Failure, FailureKind, exit_code_for
        from llmtop.tui.state.connect_failure import connect_failure_view

        self.chooser.search()  # beside the connect, as `run` does
        try:
            conn = await self.link.connect()
        except EngineError as exc:
            view = connect_failure_view(exc.failure.kind)  # "no engine" only when none answered
            self._no_engine(exc, exit_code_for(exc.failure.kind), view.header, view.title)
            return
        except Exception as exc:  # noqa: BLE001 — unforeseen: say so, stay usable to quit
            failure = Failure(
                FailureKind.PROTOCOL,
                f"connecting failed unexpectedly: {type(exc).__name__}: {exc}",
                "retry with --engine embedded, or report this with the session log",
            )
            self._no_engine(EngineError(failure), ExitCode.ENGINE_UNREACHABLE, "no engine", "")
            return
        if conn is not None:  # None: quit while the engine was starting
            await self._open_session(conn)

    def _no_engine(self, exc: EngineError, code: ExitCode, header: str, title: str) -> None:
        """No engine: the failure kept (prompts are refused), the exit code set, both shown."""
        self.link.connect_failure = exc
        self.exit_code = code
        self.main_screen.show_no_engine(exc.failure, header, title)
        self.chooser.show()

    async def _open_session(self, conn: Connection) -> None:
        """Connected: load the model of a fresh embedded engine (not measured), open the
        session log, then send a prompt typed meanwhile."""
        from llmtop.sessions.records.log import LogError
        from llmtop.sessions.runners.warmup import started_engine, warm_up

        main = self.main_screen
        main.show_connected(conn)
        self.chooser.show()
        warmup_ms = None
        if started_engine(conn):  # a fresh embedded engine: load the model before request 1
            main.show_message("loading the model (a load-only request, not measured)…")
            warmup_ms = await warm_up(conn, self.settings.options)
            if self.link.closing:  # quit while the model loaded: _close_session closed conn
                return
        try:
            recorder = self.link.open_log(conn)
        except LogError as exc:
            self.link.connect_failure = exc
            self.exit_code = ExitCode.USAGE
            main.show_message(f"✗ {exc}\n→ pass a writable file with --log", "bold red")
            return
        main.show_ready(recorder.log.path, warmup_ms)
        if self.freeze_gc_when_ready:
            gc.freeze()  # see `freeze_gc_when_ready`
        main.send_pending()

    def log_incomplete(self, why: str) -> None:
        """The session log lost a record: exit with LOG_INCOMPLETE, said once (later records
        are counted in the log)."""
        if self.exit_code != ExitCode.LOG_INCOMPLETE:
            self.exit_code = ExitCode.LOG_INCOMPLETE
            self.notify(why, title="session log incomplete", severity="error", timeout=30)

    # ------------------------------------------------------------------ probes

    def on_probe_sampled(self, message: ProbeSampled) -> None:
        """A sample from the sampler thread: the latest (every screen draws it), and the main
        screen's to draw and to mark NOISY requests with."""
        self.latest_probe = message.sample
        self.main_screen.probe_sampled(message)

    def on_probe_state_changed(self, _: ProbeStateChanged) -> None:
        self.main_screen.probes_changed()

    # ------------------------------------------------------------------ keys

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """F2 (the history), Ctrl+K (the conversation) and Ctrl+R (repeat) belong to the main
        screen: not shown, not run elsewhere (Ctrl+K on the load screen turned the
        conversation on unseen)."""
        if action in MAIN_SCREEN_ACTIONS:
            return self.screen is self.main_screen
        return True

    def action_history(self) -> None:
        """F2: show the request history (focused) or hide it (back to the prompt)."""
        self.main_screen.later.when_whole(self.main_screen.toggle_history)

    def action_keep_history(self) -> None:
        """Ctrl+K: start or end a conversation (`MainScreen.toggle_conversation`)."""
        self.main_screen.toggle_conversation()

    def action_repeat(self) -> None:
        """Ctrl+R: send the last prompt again."""
        self.main_screen.repeat()

    def action_stop(self) -> None:
        """Esc: cancel the streaming request, or leave the prompt box when idle."""
        self.main_screen.stop()

    def action_interrupt(self) -> None:
        """Ctrl+C: cancel the streaming request; idle, say how to quit."""
        self.main_screen.interrupt()

    def action_focus_prompt(self) -> None:
        """"/": back to the prompt box."""
        self.main_screen.focus_prompt()

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
        yield SystemCommand("Engine", "F4: the engine's own figures, read live",
                            self.action_engine_panel)
        yield SystemCommand("Engines", "F5: the engines answering here; pick one",
                            self.action_pick_engine)
        for command in super().get_system_commands(screen):
            if command.title != "Screenshot":
                yield command
        yield SystemCommand(
            "Screenshot",
            "Save an SVG of the screen beside the session log (else here)",
            self.action_save_screenshot,
        )

    # ------------------------------------------------------------------ other screens

    def action_save_screenshot(self) -> None:
        """Save an SVG of the screen in the session log's folder (the working directory before
        there is a log), and say where — or why it could not be written."""
        from llmtop.tui.state.fmt import saved_where

        recorder = self.link.recorder
        folder = Path.cwd() if recorder is None else recorder.log.path.parent
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
        if self.link.recorder is None:
            self.notify("no session log yet")
            return
        from llmtop.sessions.records.log import LogError, read_log
        from llmtop.sessions.reports.formats import render
        from llmtop.sessions.reports.run import build
        from llmtop.tui.screens.report import ReportScreen

        path = str(self.link.recorder.log.path)
        try:
            text = render(build(read_log(path)), "md")
        except (LogError, ValueError) as exc:
            self.notify(f"no report: {exc}", severity="error")
            return
        self.push_screen(ReportScreen(text, path, title="session report"))

    def action_apps(self) -> None:
        """F3: every app of the latest probe sample, the selected one's processes."""
        from llmtop.tui.screens.apps import AppsScreen

        if not isinstance(self.screen, AppsScreen):
            self.push_screen(AppsScreen(self.latest_probe))

    def action_help(self) -> None:
        """Show the keys and metric definitions."""
        from llmtop.tui.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    @property
    def bench_screen(self) -> BenchScreen | None:
        """The bench screen when it is open (it may be under a help screen); its module is
        looked up, not imported: none of its screens is open before it is."""
        bench = sys.modules.get("llmtop.tui.screens.bench")
        if bench is None:
            return None
        return next((s for s in self.screen_stack if isinstance(s, bench.BenchScreen)), None)

    async def action_bench(self) -> None:
        """Ctrl+B: stop the request streaming here, then open the bench screen."""
        if self.screen is not self.main_screen:
            return
        link = self.link
        if link.connect_failure is not None:
            self.notify("no engine: see the message in the response pane", severity="error")
            return
        if not link.ready or link.conn is None or link.recorder is None:
            self.notify("the engine is still starting; try again when it is ready")
            return
        from llmtop.tui.screens.bench import BenchScreen

        self.main_screen.pending = None
        await self.main_screen.cancel_stream()  # recorded as cancelled, as Esc would
        await self.push_screen(BenchScreen(self, link.conn, str(link.recorder.log.path)))

    def action_plots(self) -> None:
        """The plots screen of this session's log so far."""
        if self.link.recorder is None:
            self.notify("no session log yet")
            return
        from llmtop.tui.screens.plots import PlotsScreen

        self.push_screen(PlotsScreen(str(self.link.recorder.log.path)))

    def action_sessions(self) -> None:
        """The saved logs, in the folder of this session's log (else the default one)."""
        from llmtop.tui.screens.sessions import SessionsScreen

        recorder = self.link.recorder
        folder = () if recorder is None else (str(recorder.log.path.parent),)
        self.push_screen(SessionsScreen(folder))

    async def action_load(self) -> None:
        """Ctrl+L: the load screen (concurrency / rate sweeps) on this connection."""
        link = self.link
        if self.screen is not self.main_screen or link.conn is None or not link.ready:
            self.notify("the load screen opens from the prompt once the engine is ready")
            return
        if self.main_screen.stream_running:
            self.notify("a request is streaming: Esc stops it first")
            return
        from llmtop.tui.screens.load import LoadScreen

        await self.push_screen(LoadScreen(link.conn, self.settings))

    def bench_started(self, log_path: str, config: BenchConfig) -> None:
        """A bench began: point the session log at its log; probe as during a request."""
        from llmtop.sessions.records.schema import BenchMarkRecord

        self.link.mark(BenchMarkRecord("start", log_path, bench=config))
        self.link.probe_for_bench()

    def bench_ended(self, log_path: str, how: str) -> None:
        """A bench ended (`how`: its verdict, "cancelled" or "failed")."""
        from llmtop.sessions.records.schema import BenchMarkRecord

        self.link.mark(BenchMarkRecord("end", log_path, outcome=how))
        self.link.set_probe_interval(streaming=False)
        self.main_screen.probes_changed()  # the main panel was not drawn meanwhile

    # ------------------------------------------------------------------ other engines

    def action_engine_panel(self) -> None:
        """F4: the engine's own figures, read live (`EnginePanel`), shown or hidden."""
        self.main_screen.later.when_whole(self.main_screen.toggle_engine_panel)

    async def action_pick_engine(self) -> None:
        """F5: the engines answering here; the one picked is measured instead
        (`EngineChooser.pick`)."""
        if self.screen is self.main_screen:
            await self.chooser.pick()

    def reconnect(self) -> None:
        """Start the (new) link's probes and connect it: the engine picked with F5."""
        self.link.start_probes()
        self.main_screen.label_probes()
        self._connect()

    # ------------------------------------------------------------------ shutdown

    async def action_quit(self) -> None:
        """Cancel (and record) a streaming request, close everything, exit."""
        await self._close_session()
        self.exit(int(self.exit_code))

    async def _close_session(self) -> None:
        """Idempotent: cancel the bench and the stream (each recorded as cancelled), stop
        probes, close the log, close the connection (stopping the embedded engine)."""
        if self.link.closing:
            return
        self.link.closing = True
        bench = self.bench_screen
        if bench is not None:
            await bench.cancel_bench()  # the runner records the interruption, closes its log
        await self.main_screen.cancel_stream()
        await self.link.close()

    async def on_unmount(self) -> None:
        await self._close_session()


def preload() -> None:
    """Import what connecting and sampling need (the engines' clients, the probes, the
    session log's writer: ~0.5 s on 2 cores); run in a thread after the first frame."""
    import llmtop.connect
    import llmtop.probes.engine_identity
    import llmtop.probes.remote
    import llmtop.probes.sampler
    import llmtop.sessions.runners.recorder
    import llmtop.sessions.runners.warmup
    import llmtop.stamping.rxstamps  # noqa: F401 - imported for its side: loaded


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
    app = make_app(settings)
    app.freeze_gc_when_ready = True
    app.reader_threads = True
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
    recorder = app.link.recorder
    if recorder is None:
        return ""
    session = app.main_screen.session
    rows = [session.row(n).status for n in range(1, len(session.requests) + 1)]
    counts: dict[str, int] = {}
    for word in rows:
        counts[word] = counts.get(word, 0) + 1
    words = ", ".join(f"{n} {w}" for w, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    many = f"{len(rows)} request{'s' if len(rows) != 1 else ''}"
    return f"llmtop: session log {recorder.log.path} ({many}{': ' + words if words else ''})"


__all__ = ["LlmtopApp", "main", "make_app", "session_said"]
