"""The load screen (Ctrl+L): `llmtop load`'s sweep, through the same `LoadRunner`, on the
app's connection: the level running, requests in flight, live TTFT/TPOT percentiles and
throughput, the finished levels' table, the throughput–latency curve, and the knee.

The mode "replay a watch log" sends a `llmtop watch` log's requests again, as `llmtop load
--replay` does (runners/replay.py): the levels box then takes the watch log's path, and the
end says how each replayed request compared with its original.

The runner runs in an exclusive worker of this screen; its callbacks only update a
`LoadLive`, and one timer (RENDER_HZ) redraws when something changed.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Button, Footer, Input, Label, Select, Static
from textual.worker import Worker

from llmtop.engines.connection import Connection
from llmtop.probes.sampler import ProbeSample
from llmtop.sessions.analysis.replay import ReplayComparison, Trace, read_trace
from llmtop.sessions.measure.config import LoadConfig, Mode
from llmtop.sessions.measure.options import Workload
from llmtop.sessions.measure.slo import Slo
from llmtop.sessions.records.log import LogError
from llmtop.sessions.runners.calibration import CalibrationError
from llmtop.sessions.runners.load.config import parse_levels
from llmtop.sessions.runners.load.runner import LoadRunner
from llmtop.sessions.runners.replay import ReplayRunner, run_replay
from llmtop.tui.state.bench_config import MIN_MAX_TOKENS
from llmtop.tui.state.load_view import LoadLive, curve, finished_text, levels_table
from llmtop.tui.state.settings import TuiSettings
from llmtop.tui.widgets.machine_badge import MachineBadge

RENDER_HZ = 10
# (field id, label, default, placeholder) after the mode: the bench form's words
FIELDS: tuple[tuple[str, str, str, str], ...] = (
    ("levels", "levels", "1,2,4", "1,2,4"),
    ("requests", "requests", "20", "per level"),
    ("prompt", "prompt tokens", "200", "tokens"),
    ("max-tokens", "max tokens", str(Workload.max_tokens), "tokens"),
    ("slo", "SLO", "ttft=500ms,tpot=50ms", "ttft=500ms,tpot=50ms"),
)
REPLAY = "replay"  # the mode's value: the levels box holds a watch log's path
WATCH_LOG_HINT = "path of a `llmtop watch` log"


def replay_text(c: ReplayComparison, log_path: str) -> Text:
    """A replay's end: what was sent, how near the recorded gaps, each metric's verdict
    against the originals, the log (whose `llmtop report` shows each request)."""
    t = c.trace
    prompts = "their recorded text" if t.bodies else "prompts sized to their counts"
    lines = [f"Replayed {len(t.originals)} requests of {t.path} ({prompts})"]
    if c.max_arrival_error_ms is not None:
        off = c.arrivals_off()
        lines.append(f"arrival gaps within {c.max_arrival_error_ms:.3f} ms of the recorded ones"
                     + (f"; {off} sends more than 1 ms off (lag_ms in the log)" if off else ""))
    lines += [f"{m.metric.label}: {m.verdict}" for m in c.metrics]
    lines.append(f"log {log_path}")
    return Text("\n".join(lines))


def config_from_form(
    settings: TuiSettings, mode: Mode, levels: str, requests: str, slo: str, prompt_tokens: str,
    max_tokens: str = str(Workload.max_tokens),
) -> LoadConfig:
    """The LoadConfig the form asks for, with the app's generation options; max_tokens is
    each request's output cap (`llmtop load --max-tokens`, ≥ 2: a TPOT needs two tokens).
    Raises ValueError with a message for the user."""
    if not requests.strip().isdigit() or int(requests) < 1:
        raise ValueError("requests per level must be a whole number >= 1")
    if not prompt_tokens.strip().isdigit() or int(prompt_tokens) < 8:
        raise ValueError("prompt tokens must be a whole number >= 8")
    if not max_tokens.strip().isdigit() or int(max_tokens) < MIN_MAX_TOKENS:
        raise ValueError(f"max tokens must be a whole number >= {MIN_MAX_TOKENS} (a TPOT needs "
                         "two output tokens)")
    return LoadConfig.from_options(
        settings.options,
        mode=mode,
        levels=parse_levels(levels, mode == "concurrency"),
        requests=int(requests),
        slo=Slo.parse(slo),
        prompt_tokens=int(prompt_tokens),
        max_tokens=int(max_tokens),
    )


class LoadScreen(Screen[None]):
    """Form and live line on top; the levels' table, the curve and the knee below."""

    CSS_PATH = "../forms.tcss"  # the form rows, as on the bench screen

    # every field labelled as on the bench form, on two rows (mode, levels, requests; prompt
    # tokens, max tokens, SLO, Start) so that all fits at 80 columns, the levels and the SLO
    # taking the width left (before: unlabelled boxes, a clipped button,
    # 8-character boxes, the prompt tokens' box cut at 80). Its labels' 1-column padding is
    # in forms.tcss (its CSS_PATH): a stylesheet file outranks a screen's DEFAULT_CSS.
    DEFAULT_CSS = """
    #load-title-row { height: 1; padding: 0 1; }
    #load-title { width: auto; text-wrap: nowrap; margin-right: 2; }
    #load-badge { width: 1fr; }
    #load-form, #load-form-slo { height: 3; }
    #load-levels, #load-slo { width: 1fr; }
    #load-requests { width: 10; }
    #load-prompt { width: 9; }  /* 5 cells: "4096" and the cursor */
    #load-max-tokens { width: 8; }  /* 4 cells: "1024"; at 80 columns the SLO keeps 20 */
    #load-mode { width: 19; }
    #load-start { min-width: 9; margin-left: 1; }
    #load-body { padding: 0 1; }
    #load-live, #load-knee { height: auto; margin: 1 0 0 0; }
    #load-table, #load-curve { height: auto; margin: 1 0 0 0; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "leave", "Cancel sweep / back", priority=True),
    ]

    def __init__(self, conn: Connection, settings: TuiSettings,
                 replay_path: str | None = None) -> None:
        super().__init__()
        self.replay_path = replay_path  # opened from the sessions list: this watch log
        self.conn = conn
        self.settings = settings
        self.live = LoadLive()
        self.worker: Worker[None] | None = None
        self._probe_shown: ProbeSample | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(id="load-title-row"):
            yield Static(
                Text(f"llmtop load · {self.conn.engine.name} · {self.conn.model}", style="bold"),
                id="load-title",
            )
            yield MachineBadge(id="load-badge")  # the load screen has no probe panel
        with Horizontal(id="load-form"):
            yield Select(
                [("concurrency", "concurrency"), ("rate (req/s)", "rate"),
                 ("replay a watch log", REPLAY)],
                value="concurrency",
                allow_blank=False,
                id="load-mode",
            )
            for fid, label, value, hint in FIELDS[:2]:  # levels, requests
                yield Label(label, classes="bench-label", id=f"load-{fid}-label")
                yield Input(value, placeholder=hint, id=f"load-{fid}")
        with Horizontal(id="load-form-slo"):  # prompt and max tokens, SLO, Start: fits 80
            for fid, label, value, hint in FIELDS[2:]:
                yield Label(label, classes="bench-label")
                yield Input(value, placeholder=hint, id=f"load-{fid}")
            yield Button("Start", id="load-start", variant="primary")
        with Vertical(id="load-body"):
            yield Static("", id="load-live")
            yield Static("", id="load-table")
            yield Static("", id="load-curve")
            yield Static("", id="load-knee")
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(1 / RENDER_HZ, self._redraw, name="load-render")
        if self.replay_path is not None:  # the replay mode, its box holding the log's path
            self.query_one("#load-levels", Input).value = self.replay_path
            self.query_one("#load-mode", Select).value = REPLAY

    def on_select_changed(self, event: Select.Changed) -> None:
        """The replay mode's levels box takes a watch log's path (its label says so)."""
        replay = event.value == REPLAY
        self.query_one("#load-levels-label", Label).update("watch log" if replay else "levels")
        levels = self.query_one("#load-levels", Input)
        levels.placeholder = WATCH_LOG_HINT if replay else FIELDS[0][3]
        if replay and levels.value == FIELDS[0][2]:
            levels.value = ""

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "load-start":
            self.start()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()  # Enter in a box of this screen starts the sweep, and nothing else
        self.start()

    def start(self) -> None:
        """Start a sweep with the form's values (a bad value is shown, nothing starts)."""
        if self.running:
            return

        def value(name: str) -> str:
            return self.query_one(f"#load-{name}", Input).value

        chosen = self.query_one("#load-mode", Select).value
        if chosen == REPLAY:
            self._start_replay(value("levels"), value("max-tokens"))
            return
        mode: Mode = "rate" if chosen == "rate" else "concurrency"
        try:
            config = config_from_form(
                self.settings,
                mode,
                value("levels"),
                value("requests"),
                value("slo"),
                value("prompt"),
                value("max-tokens"),
            )
        except ValueError as exc:
            self.query_one("#load-knee", Static).update(Text(f"✗ {exc}", style="bold red"))
            return
        self.live = LoadLive()
        self.worker = self._run(config)

    def _start_replay(self, path: str, max_tokens: str) -> None:
        """Replay the watch log at `path` (a bad path or log is shown, nothing starts)."""
        knee = self.query_one("#load-knee", Static)
        try:
            if not path.strip():
                raise ValueError(f"give the {WATCH_LOG_HINT} to replay")
            if not max_tokens.strip().isdigit() or int(max_tokens) < MIN_MAX_TOKENS:
                raise ValueError(f"max tokens must be a whole number >= {MIN_MAX_TOKENS}")
            trace = read_trace(path.strip())
        except ValueError as exc:  # ReplayError is one: not a watch log, unreadable, empty
            knee.update(Text(f"✗ {exc}", style="bold red"))
            return
        knee.update("")
        self.live = LoadLive()
        self.worker = self._replay(trace, int(max_tokens))

    @work(exclusive=True, group="load", exit_on_error=False)
    async def _replay(self, trace: Trace, max_tokens: int) -> None:
        knee = self.query_one("#load-knee", Static)
        try:
            runner = await asyncio.to_thread(
                lambda: ReplayRunner(self.conn, trace, max_tokens=max_tokens,
                                     on_progress=self.live.on_progress))
            comparison, log_path = await run_replay(runner)
            knee.update(replay_text(comparison, log_path))
        except asyncio.CancelledError:
            knee.update(Text("replay cancelled (recorded in its log)", style="yellow"))
            raise
        except (CalibrationError, LogError, ValueError) as exc:
            knee.update(Text(f"✗ {type(exc).__name__}: {exc}", style="bold red"))

    @property
    def running(self) -> bool:
        """True while a sweep runs."""
        return self.worker is not None and not self.worker.is_finished

    @work(exclusive=True, group="load", exit_on_error=False)
    async def _run(self, config: LoadConfig) -> None:
        knee = self.query_one("#load-knee", Static)
        try:
            runner = await asyncio.to_thread(
                LoadRunner, self.conn, config, None, self.live.on_progress
            )
            outcome = await runner.run()
            knee.update(finished_text(outcome.analysis, outcome.log_path))
        except asyncio.CancelledError:
            knee.update(Text("sweep cancelled (recorded in its log)", style="yellow"))
            raise
        except (CalibrationError, LogError, ValueError) as exc:
            knee.update(Text(f"✗ {type(exc).__name__}: {exc}", style="bold red"))

    def _redraw(self) -> None:
        # the app's latest probe sample (LlmtopApp.latest_probe; a host without probes: none)
        sample = getattr(self.app, "latest_probe", None)
        if sample is not self._probe_shown:
            self._probe_shown = sample
            self.query_one(MachineBadge).show(sample)
        if not self.live.dirty and not self.running:
            return
        self.live.dirty = False
        self.query_one("#load-live", Static).update(self.live.live_line())
        if self.live.levels:
            self.query_one("#load-table", Static).update(levels_table(self.live.levels))
        self.query_one("#load-curve", Static).update(curve(self.live.levels))

    async def action_leave(self) -> None:
        """Esc: cancel a running sweep (its log records it), else back to the prompt."""
        if self.running and self.worker is not None:
            self.worker.cancel()
            return
        self.app.pop_screen()
