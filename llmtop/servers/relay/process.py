"""The relay as a child process (`RelayProcess`), the way llmtop starts one for `--via relay`.

It runs `python -m llmtop relay --host 127.0.0.1 --port P --upstream U --parent-pid PID` (the
same code as the `llmtop relay` command, `llmtop.commands.relay`), logs to `log_path`, and
exits if we die without stopping it.
"""

from __future__ import annotations

from llmtop.engines.hosts import resolve_host
from llmtop.servers.child import ChildServer

RELAY_START_TIMEOUT_S = 30.0


class RelayProcess(ChildServer):
    """The relay as a child process on a loopback port, in front of `upstream` (a base URL or
    anything `OLLAMA_HOST` accepts) speaking `api` ("ollama" or "openai"). `url` (also
    `host`) is its base URL once started."""

    label = "relay"
    log_name = "relay"
    remedy = "check the upstream URL"

    def __init__(self, upstream: str, port: int | None = None, api: str = "ollama") -> None:
        super().__init__(port)
        self.upstream = resolve_host(upstream)
        self.api = api

    def args(self) -> list[str]:
        """`python -m llmtop relay --host 127.0.0.1 --port P --upstream U [--upstream-api A]`."""
        api = ["--upstream-api", self.api] if self.api != "ollama" else []
        return ["llmtop", "relay", "--host", "127.0.0.1", "--port", str(self.port),
                "--upstream", self.upstream, *api]

    async def start(self, timeout_s: float = RELAY_START_TIMEOUT_S) -> None:
        """Start and wait until the relay answers."""
        await super().start(timeout_s)
