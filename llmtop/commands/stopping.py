"""SIGTERM and SIGHUP end `llmtop run` and `llmtop bench` the way Ctrl+C does.

Ctrl+C cancels the command's coroutine (asyncio.run does that for SIGINT): the request in
flight is written to the session log as cancelled, the sampler and the log are closed and
child servers stopped, each by the `except CancelledError` / `finally` blocks on the way out.
`run_stoppable` makes SIGTERM (`kill`, a service manager, a CI timeout) and SIGHUP (the
terminal closed) take the same path, then prints one line and returns the shells'
convention for a process ended by a signal: 128 + its number (143 SIGTERM, 129 SIGHUP).

SIGINT is handled here too, rather than by asyncio.run's own handler, which raises
KeyboardInterrupt at the second Ctrl+C wherever the cleanup of the first has got to (two
SIGINTs 50 ms apart ended `run` by the signal, the request in flight missing from the log).
Here the first of any of these signals cancels the coroutine and every later one, of any
kind, is ignored until the process has exited: the in-flight record is always written.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Coroutine
from typing import Any

from llmtop.exitcodes import STOP_SIGNALS, signal_exit_code

HANDLED = (signal.SIGINT, *STOP_SIGNALS)


def run_stoppable(coro: Coroutine[Any, Any, int], label: str) -> int:
    """asyncio.run(coro) and its exit code; on SIGINT, SIGTERM or SIGHUP the coroutine is
    cancelled, "<label>: stopped by SIGTERM" is printed, and 128 + the signal's number is
    returned (also when the coroutine finished its cleanup normally); repeated signals during
    the cleanup are ignored (module docstring)."""
    # asyncio (with ssl, sockets, threads: ~30 ms) only once a command runs: `llmtop run
    # --help` imports this module (commands/__init__.py)
    import asyncio

    received: list[int] = []

    async def main() -> int | None:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()

        def stop(signum: int) -> None:
            if not received and task is not None:
                received.append(signum)
                task.cancel()

        for sig in HANDLED:
            loop.add_signal_handler(sig, stop, sig)
        try:
            return await coro
        except asyncio.CancelledError:
            if received:
                return None
            raise
        finally:
            for sig in HANDLED:
                loop.remove_signal_handler(sig)
                if received:  # stopping: a later signal must not cut the exit short
                    signal.signal(sig, signal.SIG_IGN)

    code = asyncio.run(main())
    if received:
        print(f"{label}: stopped by {signal.Signals(received[0]).name}", file=sys.stderr,
              flush=True)
        return signal_exit_code(received[0])
    return int(code if code is not None else 0)
