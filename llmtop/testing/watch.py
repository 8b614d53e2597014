"""`llmtop watch`'s pass-through served in a thread for tests and benchmarks, as
`ServeInThread` serves the scripted servers (testing/scripted.py)."""

from __future__ import annotations

import threading
import time

from llmtop.servers.watch.proxy import WatchProxy, WatchServer

STARTUP_TIMEOUT_S = 10.0


class WatchInThread:
    """`with WatchInThread(proxy) as url:` serves `proxy` (a WatchProxy) on its listen
    address in a daemon thread (its own uvloop event loop) until the block ends; streams still
    open then get 1 s. Raises RuntimeError when it has not started within 10 s."""

    def __init__(self, proxy: WatchProxy) -> None:
        self.server = WatchServer(proxy, grace_s=1.0)
        host, port = proxy.listen
        self.url = f"http://{host}:{port}"
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.server.run()
        except OSError as exc:  # the port taken: said by __enter__
            self.error = exc

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self.server.started and self.thread.is_alive() \
                and time.monotonic() < deadline:
            time.sleep(0.005)
        if not self.server.started:
            raise RuntimeError(f"the watch on {self.url} did not start: {self.error}")
        return self.url

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(5)


__all__ = ["WatchInThread"]
