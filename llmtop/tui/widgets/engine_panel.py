"""The engine panel (F4): what the engine itself says, read live — llama-server's slots and
queue, vLLM's queue and KV cache, Ollama's loaded models counting down to their unload
(`engines.live_state`; what is shown: `tui.state.engine_view`).

Hidden until F4; while shown it reads the engine every `live_state.PACE_S` (1 s) in a worker
of its own, between requests and during them (every 5 s once the engine's figures stayed the
same for 30 s, until they change or a request starts), and stops reading when hidden again
(a reading costs the engine an HTTP answer and llmtop ~3 ms of CPU, measured at
`live_state.PACE_S`: nothing is read that nobody looks at). Each reading that changed a
figure is handed to `record` (the session log's `engine_state` record). The text is redrawn
in place (`QuietStatic`): a screen layout only when its number of lines changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from textual.worker import Worker

from llmtop.tui.state.engine_view import panel_text
from llmtop.tui.widgets.quiet_static import QuietStatic

if TYPE_CHECKING:
    from llmtop.engines.connection import Connection
    from llmtop.engines.discovery import FoundEngine
    from llmtop.engines.live_state import EngineState, StateReader

# the reading pace in the title; engines.live_state.PACE_S, which is imported once connected
# (not before the first frame): tests/tui/test_engine_panel.py checks they are the same
PACE_TITLE_S = 1.0


def reader_for(conn: Connection) -> tuple[StateReader | None, str | None]:
    """The reader of `conn`'s engine (the engine itself, relay or not), or None and why
    there is none."""
    from llmtop.engines.live_state import StateReader, kind_of
    from llmtop.engines.openai import OpenAIEngine  # heavy: only once connected

    upstream = conn.upstream
    if isinstance(upstream, OpenAIEngine):
        server = upstream.kind.kind if upstream.kind is not None else None
        kind = kind_of(server, "openai")
        if kind is None:
            return None, (f"{server or 'this OpenAI-compatible server'} publishes no live "
                          "figures llmtop reads (llama-server's /slots and /metrics, vLLM's "
                          "/metrics, Ollama's /api/ps)")
        from llmtop.engines.llama_props import model_query

        # a llama-server router's /slots and /metrics are its model's, asked by name
        query = model_query(upstream.model) if kind == "llama-server" and upstream.router else ""
        return StateReader(kind, upstream.root, query=query), None
    return StateReader("ollama", upstream.host), None


class EnginePanel(QuietStatic):
    """The engine's own figures (hidden until `toggle`). record: called with each reading
    that changed a figure (the main screen writes it to the session log)."""

    def __init__(self, record: Callable[[EngineState], None] | None = None,
                 **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.record = record
        self.reader: StateReader | None = None
        self.unsupported: str | None = "not connected yet"
        self.state: EngineState | None = None
        self.others: Sequence[FoundEngine] = ()
        self.client_decode: float | None = None  # llmtop's decode of the last request, tok/s
        self.server_decode: float | None = None  # the engine's, over the requests then ended
        self._awaiting_server_decode = False
        self._worker: Worker[None] | None = None
        self.readings = 0  # readings taken (tests and the capture count them)

    def on_mount(self) -> None:
        self.border_title = f"engine (F4) · its own figures every {PACE_TITLE_S:g} s"
        self.display = False

    async def on_unmount(self) -> None:
        """The app closes: stop reading and close the reader's client."""
        self._stop()
        if self.reader is not None:
            await self.reader.aclose()

    def attach(self, conn: Connection | None) -> None:
        """Read `conn`'s engine from now on (None: no engine); reading starts if shown."""
        self._stop()
        self.state = None
        self.client_decode = self.server_decode = None
        if self.reader is not None:
            reader = self.reader
            self.run_worker(reader.aclose(), group="engine-close")
        self.reader, self.unsupported = (None, "no engine") if conn is None else reader_for(conn)
        self._draw()
        self._start()

    def toggle(self) -> bool:
        """F4: show the panel and read the engine, or hide it and stop reading. Returns
        whether it is shown now."""
        self.display = not self.display
        if self.display:
            self._draw()
            self._start()
        else:
            self._stop()
        return bool(self.display)

    def set_others(self, others: Sequence[FoundEngine]) -> None:
        """The other engines answering on this machine (shown under the figures)."""
        self.others = tuple(others)
        self._draw()

    def request_started(self) -> None:
        """A request was sent: read now, at the full pace again (the idle pace of an engine
        nobody used, `live_state.poll`, would see its start up to 5 s late)."""
        if self.reading:
            self._stop()
            self._start()

    def request_ended(self, client_decode: float | None) -> None:
        """A request ended with llmtop's decode rate `client_decode` (tok/s, None: n/a): the
        next reading whose engine decode rate covers finished requests is set beside it."""
        self.client_decode = client_decode
        self.server_decode = None
        self._awaiting_server_decode = client_decode is not None

    @property
    def reading(self) -> bool:
        """True while the reading worker runs."""
        return self._worker is not None and not self._worker.is_finished

    def _start(self) -> None:
        from llmtop.engines.live_state import poll

        if self.display and self.reader is not None and not self.reading:
            self._worker = self.run_worker(poll(self.reader, self._on_state),
                                           group="engine-state", exclusive=True)

    def _stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            self._worker = None

    def _on_state(self, state: EngineState) -> None:
        """A reading: kept, recorded when a figure changed, drawn."""
        self.readings += 1
        changed = not state.same_figures(self.state)
        self.state = state
        if self._awaiting_server_decode and state.decode_tok_s is not None:
            self.server_decode = state.decode_tok_s
            self._awaiting_server_decode = False
        if changed and self.record is not None:
            self.record(state)
        self._draw()

    def _draw(self) -> None:
        if not self.display:
            return
        self.set_text(panel_text(self.state, datetime.now(UTC),
                                 client_decode=self.client_decode,
                                 server_decode=self.server_decode, others=self.others,
                                 unsupported=None if self.reader else self.unsupported))
