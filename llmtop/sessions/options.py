"""The generation options every request sends, and their defaults — defined once here.

The defaults make runs repeatable and comparable (docs/method.md, "Rules of a run"):
temperature 0 and a fixed seed, so the same prompt yields the same tokens; a fixed `num_ctx`,
because in Ollama the context size is part of the model's load settings and a different one
forces a reload. The CLI, the TUI settings and the bench configuration read these values.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class GenerationOptions:
    """Ollama `options` of a request. temperature: sampling temperature (0 = greedy);
    seed: the sampler's seed; num_ctx: context size in tokens; num_predict: the most output
    tokens (the TUI's and `run`'s default; a bench sets its own `max_tokens`); num_thread:
    the engine's CPU threads for this request, None (the default) to let the engine choose and
    to leave the key out of the request. Ollama and the embedded engine take it per request;
    on a machine with few cores, one thread fewer than the cores leaves room for the observer
    (docs/method.md, "Fixed options")."""

    temperature: float = 0.0
    seed: int = 42
    num_ctx: int = 8192
    num_predict: int = 200
    num_thread: int | None = None

    @classmethod
    def from_flags(cls, flags: Any) -> GenerationOptions:
        """From the parsed command line (any object with `temperature`, `seed`, `num_ctx` and
        `num_predict` attributes, as `llmtop.cli` declares them; `num_thread` when present)."""
        return cls(temperature=flags.temperature, seed=flags.seed, num_ctx=flags.num_ctx,
                   num_predict=flags.num_predict, num_thread=getattr(flags, "num_thread", None))

    def to_ollama(self) -> dict[str, Any]:
        """The `options` object as Ollama's API takes it (and as the session log records it);
        `num_thread` only when set."""
        options = asdict(self)
        if options["num_thread"] is None:
            del options["num_thread"]
        return options


DEFAULT_OPTIONS = GenerationOptions()
