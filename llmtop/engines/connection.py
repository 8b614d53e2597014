"""A connected engine, as the runners, the recorder and the TUI see it.

Plain data: which client streams the requests, which model, what the engine said about it,
the child processes llmtop started for it (closed with it), and how to find the measured
engine's pids. The wiring that builds one lives in `llmtop.connect` (the composition root).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llmtop.engines.base import Engine, ModelInfo, Stoppable


@dataclass
class Connection:
    """An engine ready to stream.

    engine: the client requests go through (the engine itself, or a relay client).
    model: the model tag every request names; info: its details (None when unknown).
    version: the engine's version string (None when it gave none).
    upstream_client: the engine itself when `engine` streams through a relay, else None.
    children: child servers llmtop started for this connection (the embedded engine, a relay;
    `base.Stoppable`), stopped by `close()` in reverse order.
    find_engine_pids: returns the pids of the measured engine (and of the relay in the path),
    so probes never count them as noise; None = unknown (an empty set).
    engine_config: the embedded engine's llama.cpp configuration as its `/api/version` gives
    it (servers/embedded/llama_config.Choice.to_dict: config, reason, source, trials);
    llama-server's effective configuration (`llama_props.config_from`, with "server":
    "llama-server" and its command line's "flags"); None for any other engine.
    """

    engine: Engine
    model: str
    info: ModelInfo | None
    version: str | None
    upstream_client: Engine | None = None
    children: list[Stoppable] = field(default_factory=list)
    find_engine_pids: Callable[[], set[int]] | None = None
    engine_config: dict[str, Any] | None = None

    @property
    def upstream(self) -> Engine:
        """The engine itself, relay or not."""
        return self.upstream_client if self.upstream_client is not None else self.engine

    @property
    def engine_config_short(self) -> str | None:
        """The engine's configuration in a few words, for headers (`describe_config`)."""
        return describe_config(self.engine_config)

    def compute_threads(self, options: Mapping[str, Any] | None = None) -> int | None:
        """The engine's compute threads: the requests' `num_thread` option when set, else
        the embedded engine's default (`engine_config["threads"]`), else None (unknown)."""
        wanted = (options or {}).get("num_thread")
        if isinstance(wanted, int) and not isinstance(wanted, bool) and wanted > 0:
            return wanted
        threads = (self.engine_config or {}).get("threads")
        return threads if isinstance(threads, int) and not isinstance(threads, bool) else None

    @property
    def thread_setting(self) -> str | None:
        """How a remedy tells the user to give this engine N threads, a format string with
        {n} for the probes' verdict (`verdict.evaluate`): None for an Ollama-API engine,
        which takes the requests' `num_thread` (llmtop's `--num-thread`); the OpenAI API has
        no thread-count field, so llama-server's own `--threads`, or the engine's settings."""
        from llmtop.engines.openai import OpenAIEngine  # imported here: openai.py is heavy

        if not isinstance(self.upstream, OpenAIEngine):
            return None
        if (self.engine_config or {}).get("server") == "llama-server":
            return "restarting llama-server with --threads {n}"
        return ("giving the engine {n} threads in its own settings (the OpenAI API has no "
                "thread-count field)")

    @property
    def via_relay(self) -> bool:
        """True when requests stream through llmtop's SSE relay."""
        return self.upstream_client is not None

    @property
    def engine_pids(self) -> set[int]:
        """Pids of the measured engine and the relay in its path (empty when unknown)."""
        return self.find_engine_pids() if self.find_engine_pids is not None else set()

    async def close(self) -> None:
        """Close the clients, then stop the children llmtop started (last started first)."""
        await self.engine.aclose()
        if self.upstream_client is not None:
            await self.upstream_client.aclose()
        for child in reversed(self.children):
            await asyncio.to_thread(child.stop)


def describe_config(cfg: Any) -> str | None:
    """An engine configuration (`Connection.engine_config`, a log header's) in a few words:
    the embedded engine's "llama.cpp repack on", or "llama.cpp repack off: repack killed by
    SIGILL" when a configuration died in the self-test, "… (forced)" when the user chose it,
    then the default thread count when the engine gives it ("… · 2 threads");
    llama-server's `llama_props.describe` line; None for another engine."""
    if isinstance(cfg, dict) and cfg.get("server") == "llama-server":
        # llama_props reads the server with httpx: imported here, so a module that only names
        # a Connection (the TUI's widgets, before its first frame) starts without httpx
        from llmtop.engines.llama_props import describe

        return describe(cfg)
    if not isinstance(cfg, dict) or "use_extra_bufts" not in cfg:
        return None
    words = f"llama.cpp repack {'on' if cfg['use_extra_bufts'] else 'off'}"
    killed = [f"{t.get('config')} killed by SIG{_signame(t.get('signal'))}"
              for t in cfg.get("trials") or () if isinstance(t, dict) and t.get("signal")]
    if killed:
        words = f"{words}: {', '.join(killed)}"
    elif str(cfg.get("source", "")).startswith("forced"):
        words = f"{words} (forced)"
    threads = cfg.get("threads")
    if isinstance(threads, int):  # the default thread count
        words += f" · {threads} thread{'s' if threads != 1 else ''}"
    return words


def _signame(signum: Any) -> str:
    """"ILL" for 4 (the name after "SIG"), else the number."""
    import signal

    try:
        return signal.Signals(int(signum)).name.removeprefix("SIG")
    except (TypeError, ValueError):
        return str(signum)
