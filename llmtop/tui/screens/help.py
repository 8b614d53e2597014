"""The `?` / F1 modal: the keys, and what each number means (one line each, with units)."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from llmtop.sessions.measure.metrics import E2E, ITL, LOAD, OVERHEAD, TPOT, TTFT

KEYS: tuple[tuple[str, str], ...] = (
    ("Enter", "send the prompt (a new prompt cancels the one still streaming)"),
    ("Ctrl+R", "send the last prompt again"),
    ("Ctrl+B", "bench: warm-up, calibrated fresh prompts, N requests, drift verdict, report"),
    ("  Enter", "bench: start with the form's values (requests, warm-up, prompt tokens, max)"),
    ("  R", "bench: the full markdown report once the run is done"),
    ("  Esc", "bench: cancel the run (the log records the interruption) and go back"),
    ("F2", "request history: show (focused) or hide; ↑/↓ pick a request"),
    ("  Enter", "history: put the picked request's tokens and figures on screen"),
    ("  c", "history: each figure of the picked request ÷ the request before it"),
    ("F3", "apps: every app of the latest probe sample; ↑/↓ shows one's processes"),
    ("F4", "engine panel: its own slots, queue, KV cache, tok/s (every 1 s)"),
    ("F5", "other engines answering here: pick one to measure it instead"),
    ("Ctrl+G", "plots of this session: TTFT and decode per request, histograms"),
    ("Ctrl+O", "saved sessions: report (Enter), plots (p), compare two (c, c)"),
    ("Ctrl+L", "load: concurrency or request-rate sweep on this engine, the knee"),
    ("Ctrl+K", "conversation on/off: each prompt is sent after the whole history"),
    ("Ctrl+P", "command palette: these screens, this session's report, a screenshot (SVG)"),
    ("Esc / Ctrl+C", ("stop the streaming request; when idle, leave the prompt box (↑/↓ scroll the "
             "answer; any other key types into the prompt again)")),
    ("/ or Tab", "back to the prompt box"),
    ("? or F1", "this help (? only when the prompt is empty)"),
    ("Ctrl+Q", "quit"),
)

METRICS: tuple[tuple[str, str], ...] = (
    (TTFT.label, "time to first token, ms: request sent → first chunk with text (client clock)"),
    (TPOT.label, "time per output token, ms: (E2E − TTFT) / (tokens − 1)"),
    (ITL.label, "inter-token latency, ms: gap between successive text chunks (the sparkline)"),
    ("gaps", "token gaps: 1 token per chunk (server's count); else chunk gaps"),
    ("TTFT/req", "TTFT per request of the session, one cell each; ▲ on screen, ! NOISY"),
    (E2E.label, "end to end, ms: request sent → the server's done chunk"),
    ("chunks", "text chunks received so far (tokens = the server's eval_count once done)"),
    ("decode", "live: chunks/s on the client; done: (tokens − 1) / (E2E − TTFT), tok/s"),
    ("prefill", "server: prompt_eval_count / prompt_eval_duration, tok/s"),
    ("srv decode", "server: eval_count / eval_duration, tok/s (Ollama's convention)"),
    (LOAD.label, "server: time spent loading the model (cold start), ms"),
    (OVERHEAD.label, "TTFT − (load + prompt eval), ms: time outside the engine's own work"),
    ("CPU %", "machine total 0–100 %; per app: % of one core (a busy app can pass 100)"),
    ("QUIET", "no finding at WARN or worse; NOISY lists what disturbs the measurement"),
    ("⚠ / !", "a probe sample taken while that request streamed was NOISY"),
    ("drift", "bench: first 5 vs last 5 baseline medians, signed; ±5 % either way = CONTAMINATED"),
    ("episode", "bench: requests slowed beyond the noise (e), left out and re-measured"),
)


def _table(title: str, rows: tuple[tuple[str, str], ...]) -> Table:
    table = Table(title=title, title_justify="left", show_header=False, box=None, padding=(0, 1))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    for key, what in rows:
        table.add_row(key, what)
    return table


class HelpScreen(ModalScreen[None]):
    """Keys and metric definitions; Esc, q, ? or F1 closes it."""

    CSS_PATH = "../help.tcss"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark,f1", "dismiss", "Close help"),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(_table("Keys", KEYS), id="help-keys")
            yield Static(_table("What the numbers mean", METRICS), id="help-metrics")
            yield Static(Text("Esc closes this help", style="dim"))
