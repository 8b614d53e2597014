"""The other engines answering on this machine, for the TUI: found in the background when
llmtop chose the engine (`auto_chosen`), named once the connection is made (a notice, the
foot of the engine panel), offered by the picker (F5, `screens.engine_picker`), and the one
picked measured instead (`EngineChooser.switch`): the app's link is replaced, with a new
session log. Not a Textual object: the app shows what it does.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from llmtop.exitcodes import ExitCode
from llmtop.tui.link import EngineLink
from llmtop.tui.state.settings import TuiSettings

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from textual.screen import Screen

    from llmtop.engines.connection import Connection
    from llmtop.engines.discovery import FoundEngine


class ChooserHost(Protocol):
    """What the chooser needs of the app (`LlmtopApp` provides it)."""

    settings: TuiSettings
    link: EngineLink
    exit_code: ExitCode

    @property
    def main_screen(self) -> Any: ...

    @property
    def screen(self) -> Screen[Any]: ...

    def notify(self, message: str, *, title: str = "", timeout: float | None = None,
               markup: bool = True) -> None: ...

    def push_screen(self, screen: Any, callback: Any = None) -> Any: ...

    def post_message(self, message: Any) -> bool: ...

    def run_worker(self, work: Coroutine[Any, Any, Any], *, group: str = "default",
                   exclusive: bool = False) -> Any: ...

    def reconnect(self) -> None: ...


def auto_chosen(settings: TuiSettings) -> bool:
    """Whether llmtop chose the engine (no `--engine`, `--host`, `$OLLAMA_HOST`, relay or
    GGUF given): then, and only then, the TUI searches the other engines by itself."""
    return (settings.engine == "auto" and not settings.host and not settings.model_path
            and not settings.relay_url and not os.environ.get("OLLAMA_HOST", "").strip())


def next_log(log_path: str | None, n: int) -> str | None:
    """The session log after the `n`-th engine picked: beside the one given with --log
    ("s.jsonl" → "s.2.jsonl" for n = 1: the engine's second log), else a new file in the
    default folder (None)."""
    if log_path is None:
        return None
    path = Path(log_path)
    return str(path.with_name(f"{path.stem}.{n + 1}{path.suffix}"))


def engine_root(conn: Connection) -> str:
    """The root URL of the engine `conn` measures ("http://127.0.0.1:8080"), as discovery
    names engines."""
    upstream = conn.upstream
    root = getattr(upstream, "root", None) or upstream.host
    return str(root).rstrip("/").removesuffix("/v1").replace("://localhost:", "://127.0.0.1:")


class EngineChooser:
    """The engines found (`found`: None until searched), whether the notice naming them was
    shown, and how many engines were picked (each gets its own session log)."""

    def __init__(self, app: ChooserHost) -> None:
        self.app = app
        self.found: tuple[FoundEngine, ...] | None = None
        self.said = False
        self.switches = 0

    async def _discover(self) -> tuple[FoundEngine, ...]:
        """What `llmtop engines` finds: the usual ports and the listening sockets of known
        engine processes (an engine started on a port of its own)."""
        from llmtop.connect import find_engines

        return (await find_engines()).engines

    def search(self) -> None:
        """When llmtop chose the engine (`auto_chosen`, no engine injected by a test): the
        usual ports searched in a worker beside the connect; the first frame never waits."""
        if not auto_chosen(self.app.settings) or self.app.link.injected is not None:
            return

        async def find() -> None:
            self.found = await self._discover()
            self.show()

        self.app.run_worker(find(), group="discover", exclusive=True)

    def others(self) -> list[FoundEngine]:
        """The engines found besides the one in use."""
        conn = self.app.link.conn
        in_use = engine_root(conn) if conn is not None else None
        return [e for e in self.found or () if e.url != in_use]

    def show(self) -> None:
        """Once both the search and the connection (or its failure) are done: the others on
        the main screen and, the first time there are any, in a notice."""
        link = self.app.link
        if self.found is None or (link.conn is None and link.connect_failure is None):
            return
        others = self.others()
        self.app.main_screen.show_other_engines(others)
        if others and not self.said:
            self.said = True
            self.app.notify(f"also answering here: {named(others)} — F5 picks one, F4 shows the "
                            "engine's own figures", title="other engines", timeout=8,
                            markup=False)

    async def pick(self) -> None:
        """F5: the picker of the engines answering here (searched now when they were not
        yet); the one picked replaces the engine in use (`switch`)."""
        from llmtop.tui.screens.engine_picker import EnginePicker

        if self.found is None:
            self.app.notify("looking for engines on the usual ports…", timeout=3)
            self.found = await self._discover()
        if not self.found:
            self.app.notify("no engine answers on the usual ports (`llmtop engines --ports` "
                            "searches others)", timeout=8, markup=False)
            return
        conn = self.app.link.conn
        in_use = engine_root(conn) if conn is not None else None

        async def picked(found: FoundEngine | None) -> None:
            if found is not None:
                await self.switch(found)

        self.app.push_screen(EnginePicker(self.found, in_use), callback=picked)

    async def switch(self, found: FoundEngine) -> None:
        """Measure `found` from now on, as if llmtop had been started with its flags
        (`--engine`, `--host`, `--model`): the request streaming is cancelled (recorded),
        the probes stopped, the session log closed and the engine llmtop started, if any,
        stopped; then a new link connects and opens a new session log, and the screen's
        session starts afresh with it (`MainScreen.new_session`: one log, one engine)."""
        from llmtop.tui.screens.engine_picker import engine_flag

        app = self.app
        await app.main_screen.cancel_stream()
        app.link.closing = True
        await app.link.close()
        self.switches += 1
        app.settings = replace(app.settings, engine=engine_flag(found), host=found.host,
                               model=found.model, model_path=None,
                               log_path=next_log(app.settings.log_path, self.switches))
        app.link = EngineLink(app.settings, None, post=app.post_message,
                              idle=lambda: app.main_screen.render_paused)
        app.exit_code = ExitCode.OK
        app.main_screen.show_switching(f"{found.kind} at {found.url}")
        app.reconnect()


def named(engines: Sequence[FoundEngine]) -> str:
    """"llama-server at http://127.0.0.1:8080, …" (the first three)."""
    return ", ".join(f"{e.kind} at {e.url}" for e in engines[:3])
