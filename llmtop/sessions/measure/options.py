"""The generation options every request sends, and their defaults — defined once here.

The defaults make runs repeatable and comparable (docs/method.md, "Rules of a run"):
temperature 0 and a fixed seed, so the same prompt yields the same tokens; a fixed `num_ctx`,
because in Ollama the context size is part of the model's load settings and a different one
forces a reload. The CLI, the TUI settings and the bench configuration read these values.

`Workload` is what every request of a bench or a sweep sends (output tokens, the options,
thinking) and whether calibration may use its cache: declared once, the base of both
`BenchConfig` and `LoadConfig`, and mapped from the command line once (`from_flags`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Self


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

# The source's protocol: 25 measured requests per prompt size after 1 warm-up, prompts of ~200
# tokens (config.BenchConfig's defaults; here, where the TUI's settings read them without
# the bench's own modules before its first frame)
PROTOCOL_REQUESTS = 25
PROTOCOL_WARMUP = 1
PROTOCOL_PROMPT_TOKENS: tuple[int, ...] = (200,)


@dataclass(frozen=True)
class Workload:
    """The fixed request of a bench or a sweep (the prompt sizes are each one's own: a bench
    has several, a sweep one). max_tokens: num_predict, tokens; num_ctx / temperature / seed /
    num_thread: GenerationOptions' (num_thread None: the engine's choice); think: send
    `think` true/false (None: not sent); use_cache: calibration may read its cache."""

    max_tokens: int = 100
    num_ctx: int = DEFAULT_OPTIONS.num_ctx
    temperature: float = DEFAULT_OPTIONS.temperature
    seed: int = DEFAULT_OPTIONS.seed
    num_thread: int | None = None
    think: bool | None = None
    use_cache: bool = True

    @classmethod
    def from_flags(cls, flags: Any, **fields: Any) -> Self:
        """One of `cls` (a Workload, or a config built on it) from the parsed command line
        (`max_tokens`, `num_ctx`, `temperature`, `seed`, `num_thread`, `think` "on"/"off"/None,
        `no_cache`, as `llmtop.cli` declares them for bench and load) plus `fields`, the
        config's own. Raises what the config's checks raise (ValueError)."""
        think = None if flags.think is None else flags.think == "on"
        return cls(max_tokens=flags.max_tokens, num_ctx=flags.num_ctx,
                   temperature=flags.temperature, seed=flags.seed, num_thread=flags.num_thread,
                   think=think, use_cache=not flags.no_cache, **fields)

    @classmethod
    def from_options(cls, options: Mapping[str, Any], **fields: Any) -> Self:
        """One of `cls` on top of a session's Ollama `options` (temperature, seed, num_ctx,
        num_thread; the defaults where absent) plus `fields`, the config's own (the TUI's
        forms: a bench or sweep run with the session's options)."""
        return cls(num_ctx=int(options.get("num_ctx", DEFAULT_OPTIONS.num_ctx)),
                   temperature=float(options.get("temperature", DEFAULT_OPTIONS.temperature)),
                   seed=int(options.get("seed", DEFAULT_OPTIONS.seed)),
                   num_thread=options.get("num_thread"), **fields)

    def options(self) -> dict[str, Any]:
        """The Ollama `options` every request sends (num_predict = max_tokens)."""
        return GenerationOptions(temperature=self.temperature, seed=self.seed,
                                 num_ctx=self.num_ctx, num_predict=self.max_tokens,
                                 num_thread=self.num_thread).to_ollama()
