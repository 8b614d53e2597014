"""Serving one of llmtop's servers (`llmtop engine`, `llmtop relay`) until a signal stops it.

SIGTERM (how llmtop stops its child servers), SIGHUP (the terminal closed) and SIGINT
(Ctrl+C) all stop the server the same way, within about a second even mid-generation:
uvicorn stops accepting, gives open connections GRACE_S seconds, then cancels them (a
cancelled stream sets the generation's cancel flag), and the app's lifespan shutdown runs.
Once its own cleanup is done, the command leaves with `leave()` (os._exit): the
interpreter's finalization of a server process takes another ~0.6 s (measured with the relay
on a 2-core machine), and a thread still inside llama.cpp would hold it up indefinitely. The
exit status is ExitCode.OK: stopping a server is its normal end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, NoReturn

import uvicorn

GRACE_S = 0.2  # open connections get this long to finish after a stop signal
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
TICK_S = 1.0  # the server's housekeeping period (uvicorn's own: 0.1 s)


class QuietServer(uvicorn.Server):
    """uvicorn's Server, woken once a second instead of ten times while idle, and at once
    when told to stop (`should_exit = True`, from a signal handler or another thread).

    Each wakeup of an idle server process costs CPU: 1.35 ms per second for the relay at
    uvicorn's 0.1 s tick, measured on a 2-core VM (about 0.13 ms a wakeup), which a
    benchmark counts against the server. The tick only refreshes the Date header (once a
    second in uvicorn too) and checks whether to stop.
    """

    _loop: asyncio.AbstractEventLoop | None = None
    _wake: asyncio.Event | None = None
    _should_exit = False

    @property  # type: ignore[override]
    def should_exit(self) -> bool:
        """Whether the server is to stop; setting it True wakes the main loop."""
        return self._should_exit

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._should_exit = value
        if value and self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def main_loop(self) -> None:
        """uvicorn's main loop at TICK_S (on_tick refreshes the Date header when its counter
        is a multiple of 10)."""
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 10) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), TICK_S)


def leave(code: int) -> NoReturn:
    """End the process now with `code`, standard streams flushed, without the interpreter's
    finalization (see the module docstring). For a server command whose cleanup is done."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code))


def serve(app: Any, host: str, port: int, label: str,
          on_stopped: Callable[[], bool] | None = None) -> None:
    """Serve `app` on host:port until SIGTERM, SIGHUP or SIGINT; print one line naming the
    signal ("llmtop engine: stopped (SIGTERM)"). `on_stopped()` runs after the server has
    shut down; when it returns False (work that cannot be interrupted is still running in a
    thread), the process leaves at once with status 0 rather than wait for it."""
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                            # a float works (it is asyncio.wait_for's timeout); the hint says int
                            timeout_graceful_shutdown=GRACE_S)  # type: ignore[arg-type]
    server = QuietServer(config)
    received: list[int] = []

    def record(signum: int, _frame: FrameType | None) -> None:
        # SIGTERM and SIGINT: uvicorn catches them while it runs and raises them again
        # here once it has shut down. SIGHUP, which uvicorn does not handle, stops it here.
        received.append(signum)
        server.should_exit = True

    previous = {sig: signal.signal(sig, record) for sig in STOP_SIGNALS}
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:
        print(f"{label}: stopped ({signal.Signals(received[0]).name})", file=sys.stderr,
              flush=True)
    if on_stopped is not None and not on_stopped():
        leave(0)  # a thread inside llama.cpp would hold up the interpreter's exit
