"""What every engine is: the `Engine` protocol, the model details it reports, its error.

Every token producer (the Ollama-API client, the relay client, the test fakes) has this shape,
so the runners (`sessions/runners/`), the calibration and the composition root
(`llmtop.connect`) never depend on which engine they drive. A stream never raises for a
server's misbehaviour: it ends with a `StreamEvent(done=True, failure=...)`. Metadata calls
raise `EngineError`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from llmtop.engines.events import Failure, StreamEvent


class Engine(Protocol):
    """A client of one engine. `name` labels it ("ollama", "embedded", "… via relay");
    `host` is its base URL ("http://127.0.0.1:11434")."""

    name: str
    host: str

    def stream_chat(
        self,
        model: str,
        messages: list[Mapping[str, Any]],
        *,
        options: Mapping[str, Any] | None = None,
        think: bool | str | None = None,
        keep_alive: float | str | None = None,
    ) -> AsyncGenerator[StreamEvent, None]:
        """Stream one chat request; lazy (sent on the first iteration). Yields text events
        stamped at arrival, then exactly one `done` event (server stats, or a failure)."""
        ...

    async def version(self) -> str:
        """The server's version string. Raises EngineError."""
        ...

    async def list_models(self) -> list[str]:
        """Installed model names. Raises EngineError."""
        ...

    async def model_info(self, model: str) -> ModelInfo:
        """Details of `model`. Raises EngineError (kind MODEL_NOT_FOUND for an unknown one)."""
        ...

    async def aclose(self) -> None:
        """Close the client's connections."""
        ...


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What the engine says about a model (`/api/show` + `/api/ps`), for headers and logs.

    parameter_size e.g. "268.10M"; quantization e.g. "Q4_K_M"; sizes in bytes (None when the
    model is not loaded); context_length in tokens as allocated by the runner.
    """

    name: str
    family: str | None = None
    parameter_size: str | None = None
    quantization: str | None = None
    format: str | None = None
    size: int | None = None
    size_vram: int | None = None
    context_length: int | None = None
    model_info: dict[str, Any] = field(default_factory=dict)
    # False: the model has no chat template of its own (Ollama's default `{{ .Prompt }}`),
    # i.e. a base model that continues text; None: unknown
    chat_template: bool | None = None
    # Where the model runs when not on the engine's machine: "ollama.com" for an Ollama cloud
    # model (engines/ollama.py, `cloud_host`); None: on the engine's own machine
    remote: str | None = None
    # The model's weights in bytes as stored (the GGUF's size: Ollama's /api/tags `size`,
    # llama-server's `meta.size`); decode in a dense model reads about all of them per token
    weights_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field (`remote` and `weights_bytes` only when set: a dict
        without them is as it always was)."""
        return {
            "name": self.name,
            "family": self.family,
            "parameter_size": self.parameter_size,
            "quantization": self.quantization,
            "format": self.format,
            "size": self.size,
            "size_vram": self.size_vram,
            "context_length": self.context_length,
            "chat_template": self.chat_template,
            **({"remote": self.remote} if self.remote else {}),
            **({"weights_bytes": self.weights_bytes} if self.weights_bytes else {}),
        }


class Stoppable(Protocol):
    """A server process llmtop started for a connection (the embedded engine, a relay), as the
    connection sees it: its pid while it runs (None once it ended), and `stop()`, which ends it
    and waits at most `timeout_s` seconds before killing it. `llmtop.servers.child.ChildServer`
    is the implementation; engines depend on this shape, not on the servers."""

    @property
    def pid(self) -> int | None:
        """The process id while the process runs, else None."""
        ...

    def stop(self, timeout_s: float = 5.0) -> None:
        """End the process (blocking; killed after `timeout_s` s)."""
        ...


class EngineError(Exception):
    """A non-streaming call failed; `failure` says what happened and what to do."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(str(failure))
        self.failure = failure
