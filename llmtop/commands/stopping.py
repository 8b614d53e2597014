"""SIGTERM and SIGHUP end `llmtop run` and `llmtop bench` the way Ctrl+C does.

Ctrl+C cancels the command's coroutine (asyncio.run does that for SIGINT): the request in
flight is written to the session log as cancelled, the sampler and the log are closed and
child servers stopped, each by the `except CancelledError` / `finally` blocks on the way out.
`run_stoppable` makes SIGTERM (`kill`, a service manager, a CI timeout) and SIGHUP (the
terminal closed) take the same path, then prints one line and returns the shells'
convention for a process ended by a signal: 128 + its number (143 SIGTERM, 129 SIGHUP).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Coroutine
from typing import Any

from llmtop.exitcodes import STOP_SIGNALS, signal_exit_code


def run_stoppable(coro: Coroutine[Any, Any, int], label: str) -> int:
    """asyncio.run(coro) and its exit code; on SIGTERM or SIGHUP the coroutine is cancelled
    as on Ctrl+C, "<label>: stopped by SIGTERM" is printed, and 128 + the signal's number is
    returned (also when the coroutine finished its cleanup normally)."""
    received: list[int] = []

    async def main() -> int | None:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()

        def stop(signum: int) -> None:
            if not received and task is not None:
                received.append(signum)
                task.cancel()

        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, stop, sig)
        try:
            return await coro
        except asyncio.CancelledError:
            if received:
                return None
            raise
        finally:
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)

    code = asyncio.run(main())
    if received:
        print(f"{label}: stopped by {signal.Signals(received[0]).name}", file=sys.stderr,
              flush=True)
        return signal_exit_code(received[0])
    return int(code if code is not None else 0)
