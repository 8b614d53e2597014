"""llama.cpp (through llama-cpp-python) as a blocking token generator with honest timings.

This is the part of the embedded engine that touches the model; `app.py` puts Ollama's
HTTP API in front of it. Everything here is blocking and must run off the event loop.

Timings come from llama.cpp's own perf counters (`llama_perf_context`, reset before each
request), mapped to Ollama's fields (docs/protocols.md, "llama.cpp timings"):

* `prompt_eval_duration` = `t_p_eval_ms` (multi-token decodes: the prompt batch).
* `eval_duration` = `t_eval_ms` (single-token decodes: one per generated token after the
  first, which comes from the prompt batch's logits — so N tokens take N − 1 decodes, the same
  interval Ollama reports).
* `prompt_eval_count` = the whole prompt, cached prefix included (current Ollama semantics);
  `eval_count` = tokens sampled, the end-of-generation token included (as llama-server's
  `n_decoded`).

Two details keep that mapping exact: the batch size equals the context size, so the prompt is
one decode and never leaves a 1-token tail batch (which llama.cpp would book as *eval*); and a
prefix-cache hit always leaves at least 2 prompt tokens to evaluate for the same reason.
"""

from __future__ import annotations

import codecs
import os
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any

import psutil

from llmtop.probes.cgroup import read_limits
from llmtop.probes.verdict import FEW_CORES

DEFAULT_NUM_CTX = 4096  # Ollama's default context on machines with < 23 GiB of VRAM
# Ollama's DefaultOptions (api/types.go): top_k 40, top_p 0.9, temperature 0.8, min_p 0,
# repeat_penalty 1.0; seed −1 means random.
DEFAULT_SAMPLING = {
    "temperature": 0.8,
    "top_k": 40,
    "top_p": 0.9,
    "min_p": 0.0,
    "repeat_penalty": 1.0,
}


class GenerationError(Exception):
    """The model could not run the request (load failure, context overflow...)."""


class OutOfMemory(GenerationError):
    """Loading with the asked settings needs more memory than the machine could give."""


KV_ENTRY_BYTES = 2  # llama.cpp's default K and V cache type is f16
LOGIT_BYTES = 4  # llama-cpp-python's `scores` array is float32


def context_memory(num_ctx: int, model_info: Mapping[str, Any], n_vocab: int) -> tuple[int, int]:
    """(KV cache bytes, logits buffer bytes) that a load with `num_ctx` tokens allocates.

    KV cache: num_ctx × layers × KV heads × (key length + value length) × 2 bytes (f16), from
    the GGUF's `<arch>.block_count`, `.attention.head_count_kv`, `.attention.key_length` and
    `.value_length` (an upper bound for models with sliding-window layers). Logits buffer:
    llama-cpp-python allocates `scores` as n_batch × n_vocab float32 at load, and this backend
    sets n_batch = num_ctx (module docstring), so num_ctx × n_vocab × 4 bytes: 1 MiB per
    context token for Gemma 3's 262,144-token vocabulary.
    """
    arch = model_info.get("general.architecture", "")

    def number(key: str, default: int = 0) -> int:
        value = model_info.get(f"{arch}.{key}", default)
        return int(max(value) if isinstance(value, list | tuple) and value else value or 0)

    heads = number("attention.head_count", 1) or 1
    heads_kv = number("attention.head_count_kv", heads) or heads
    head_dim = number("embedding_length") // heads
    key, value = (
        number("attention.key_length", head_dim),
        number("attention.value_length", head_dim),
    )
    kv = num_ctx * number("block_count") * heads_kv * (key + value) * KV_ENTRY_BYTES
    return kv, num_ctx * n_vocab * LOGIT_BYTES


@dataclass(frozen=True, slots=True)
class LoadSettings:
    """Settings that fix a loaded model: changing one forces a reload (like Ollama's runner
    options). num_ctx in tokens; num_thread None = `default_threads()`."""

    model_path: str
    num_ctx: int = DEFAULT_NUM_CTX
    num_thread: int | None = None


@dataclass(frozen=True, slots=True)
class Sampling:
    """Per-request sampling options (Ollama `options` names)."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.9
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    seed: int | None = None  # None or negative: a random seed per request
    num_predict: int = -1  # -1: until a stop (bounded by the context)
    stop: tuple[str, ...] = ()


@dataclass(slots=True)
class GenerationResult:
    """Counts and durations of one generation, in Ollama's units (tokens, ns).

    done_reason: "stop" (end-of-generation token or stop string) or "length"
    (num_predict reached or context full). `tokens` holds prompt + output token ids.
    """

    prompt_eval_count: int = 0
    prompt_eval_duration: int = 0
    eval_count: int = 0
    eval_duration: int = 0
    done_reason: str = "stop"
    cancelled: bool = False
    tokens: list[int] = field(default_factory=list)


class StopScanner:
    """Holds back text that could be the start of a stop string; cuts at the first stop.

    `feed(text)` returns (text safe to emit, stopped). Text after a stop string is dropped.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(s for s in stops if s)
        self.pending = ""

    def feed(self, text: str) -> tuple[str, bool]:
        """Add text; return what can be emitted now and whether a stop string was hit."""
        if not self.stops:
            return text, False
        self.pending += text
        cut = min((i for i in (self.pending.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            out, self.pending = self.pending[:cut], ""
            return out, True
        hold = 0
        for stop in self.stops:  # longest suffix of pending that starts some stop string
            for k in range(min(len(stop) - 1, len(self.pending)), hold, -1):
                if stop.startswith(self.pending[-k:]):
                    hold = k
                    break
        out = self.pending[: len(self.pending) - hold]
        self.pending = self.pending[len(out) :]
        return out, False

    def flush(self) -> str:
        """The held-back text, at the end of a generation that stopped for another reason."""
        out, self.pending = self.pending, ""
        return out


class LlamaBackend:
    """One llama.cpp model, loaded lazily, used by one generation at a time.

    Not thread-safe by itself: the caller serialises `ensure_loaded`, `generate` and `unload`
    (the embedded server holds one lock around each request).
    """

    def __init__(self, model_path: str, *, chat_format: str = "gemma") -> None:
        self.model_path = model_path
        self.chat_format = chat_format
        self._llm: Any = None
        self._settings: LoadSettings | None = None
        self._formatter: Any = None
        self._vocab: Any = None  # a vocab-only load: tokenizes before (and without) the model
        self._vocab_lock = threading.Lock()

    @property
    def loaded(self) -> LoadSettings | None:
        """The settings of the loaded model, or None when nothing is loaded."""
        return self._settings

    def ensure_loaded(self, settings: LoadSettings) -> int:
        """Load (or reload with new settings) the model; return the ns spent loading (0 if it
        was already loaded as asked). Raises GenerationError when llama.cpp cannot load it."""
        if self._llm is not None and self._settings == settings:
            return 0
        t0 = perf_counter_ns()
        self.unload()
        try:
            import llama_cpp
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise GenerationError(
                "llama-cpp-python is not installed; install llmtop with the `embedded` extra"
            ) from exc
        threads = settings.num_thread or default_threads().threads
        try:
            self._llm = llama_cpp.Llama(
                model_path=settings.model_path,
                n_ctx=settings.num_ctx,
                n_batch=settings.num_ctx,  # one decode per prompt: see the module docstring
                n_threads=threads,
                n_threads_batch=threads,
                verbose=False,
            )
        except MemoryError as exc:  # numpy's "Unable to allocate ... for an array" included
            self._llm = None
            raise OutOfMemory(f"num_ctx {settings.num_ctx} needs more memory than this "
                              f"machine could give ({exc}); use a smaller num_ctx") from exc
        except Exception as exc:
            self._llm = None
            raise GenerationError(f"cannot load {settings.model_path}: {exc}") from exc
        self._settings = settings
        self._warm_up()
        return perf_counter_ns() - t0

    def _warm_up(self) -> None:
        """Run one batch decode and one single-token decode, then forget them, so llama.cpp's
        lazy first-decode setup is paid inside the load (as llama-server's own warm-up does)
        instead of inflating the first request's prefill and first inter-token gap."""
        import llama_cpp

        llm = self._llm
        bos, eos = llm.token_bos(), llm.token_eos()
        llm.eval([bos, eos])
        llm.eval([eos])
        # llama.cpp books a decode's time at the next synchronize; without this one the
        # warm-up would be added to the first request's prompt-eval time and count.
        llama_cpp.llama_synchronize(llm._ctx.ctx)
        llm.reset()

    def unload(self) -> None:
        """Free the model (a no-op when none is loaded); the vocabulary stays."""
        if self._llm is not None:
            self._llm.close()
        self._llm = None
        self._settings = None

    def close(self) -> None:
        """Free the model and the vocabulary."""
        self.unload()
        with self._vocab_lock:
            if self._vocab is not None:
                self._vocab.close()
            self._vocab = None

    def vocab(self) -> Any:
        """The vocabulary-only llama.cpp load (no weights, ~1 s once): tokenizing and chat
        templates work without the model, so a prompt can be measured before it takes the
        generation slot. Thread-safe; raises GenerationError when the file cannot be read."""
        with self._vocab_lock:
            if self._vocab is None:
                try:
                    import llama_cpp

                    self._vocab = llama_cpp.Llama(model_path=self.model_path, vocab_only=True,
                                                  verbose=False)
                except Exception as exc:
                    raise GenerationError(f"cannot load {self.model_path}: {exc}") from exc
                self._formatter = self._make_formatter(self._vocab)
            return self._vocab

    @property
    def vocab_loaded(self) -> bool:
        """True once the vocabulary-only load is done (`vocab`)."""
        return self._vocab is not None

    def n_vocab(self) -> int:
        """The vocabulary's size in tokens."""
        return int(self.vocab().n_vocab())

    def _make_formatter(self, llm: Any) -> Callable[..., Any]:
        from llama_cpp import llama_chat_format

        if self.chat_format in ("gemma", "raw"):  # "raw": chat_prompt never calls it
            gemma: Callable[..., Any] = llama_chat_format.format_gemma

            def as_ollama(messages: list[Mapping[str, Any]], **kw: Any) -> Any:
                # llama-cpp-python's gemma format drops system messages; Ollama's gemma3
                # template renders each as a user turn of its own, so do the same (a system
                # prompt that vanished would also leave the prompt cache matching prompts
                # that differ only there: bench's cache-defeated replay).
                turns = [{**m, "role": "user"} if m.get("role") == "system" else m
                         for m in messages]
                return gemma(messages=turns, **kw)

            return as_ollama
        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            return self._no_template
        vocab = llm._model

        def piece(token_id: int) -> str:
            return str(vocab.token_to_piece(token_id, special=True).decode("utf-8", "ignore"))

        return llama_chat_format.Jinja2ChatFormatter(
            template=template,
            eos_token=piece(llm.token_eos()),
            bos_token=piece(llm.token_bos()),
        )

    def _no_template(self, **_: Any) -> Any:
        raise GenerationError(
            f"{self.model_path} has no chat template; use /api/generate or --chat-format gemma"
        )

    # ------------------------------------------------------------------ prompts

    def chat_prompt(self, messages: Sequence[Mapping[str, Any]]) -> tuple[str, tuple[str, ...]]:
        """Render chat messages with the model's chat format; return (prompt, stop strings).

        chat_format "raw" is what Ollama does for a model that has no template: its default
        template is `{{ .Prompt }}`, so the prompt is the users' text and nothing else (a base
        model continues it as text; wrapped in a chat template it was never trained on, it
        echoes the prompt and babbles). Raises GenerationError for a model without a chat
        template under chat_format "auto".
        """
        if self.chat_format == "raw":
            return "".join(str(m.get("content") or "") for m in messages
                           if m.get("role") == "user"), ()
        self.vocab()
        formatted = self._formatter(messages=list(messages))
        stop = formatted.stop
        stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
        return formatted.prompt, stops

    def tokenize(self, text: str) -> list[int]:
        """Prompt text → token ids, with BOS and special tokens parsed (`<start_of_turn>`).
        Uses the vocabulary-only load, so it runs without the model and outside its slot."""
        return list(self.vocab().tokenize(text.encode("utf-8"), add_bos=True, special=True))

    # ------------------------------------------------------------------ generation

    def generate(
        self,
        prompt_tokens: list[int],
        sampling: Sampling,
        emit: Callable[[str], None],
        cancel: threading.Event,
    ) -> GenerationResult:
        """Run one generation, calling `emit(text)` with each complete piece of UTF-8 text.

        Stops at an end-of-generation token or a stop string ("stop"), at num_predict or a
        full context ("length"), or when `cancel` is set (checked after every token).
        Raises GenerationError for prompts that do not fit the context.
        """
        import llama_cpp

        llm = self._llm
        n_ctx = llm.n_ctx()
        prompt_tokens = self._fit_prompt(prompt_tokens, n_ctx)
        result = GenerationResult(prompt_eval_count=len(prompt_tokens))
        budget = n_ctx - len(prompt_tokens)
        if sampling.num_predict >= 0:
            budget = min(budget, sampling.num_predict)
        if budget <= 0:
            result.done_reason = "length"
            return result

        # Keep a prefix-cache hit from leaving fewer than 2 prompt tokens to evaluate: a
        # 1-token decode would be booked by llama.cpp as generation, not prompt eval.
        llm.n_tokens = min(llm.n_tokens, max(0, len(prompt_tokens) - 2))
        seed = (
            sampling.seed
            if sampling.seed is not None and sampling.seed >= 0
            else random.getrandbits(31)
        )
        llm.set_seed(seed & 0xFFFFFFFF)  # llama.cpp's sampler seed is a uint32; Ollama's an int64
        llama_cpp.llama_perf_context_reset(llm._ctx.ctx)
        output = self._decode(prompt_tokens, sampling, budget, emit, cancel, result)

        perf = llama_cpp.llama_perf_context(llm._ctx.ctx)
        # llama_perf_context clamps counts to >= 1, so trust the times, not the counts.
        result.prompt_eval_duration = round(perf.t_p_eval_ms * 1_000_000)
        result.eval_duration = round(perf.t_eval_ms * 1_000_000)
        result.eval_count = len(output)
        result.tokens = list(prompt_tokens) + output
        return result

    def _decode(
        self,
        prompt_tokens: list[int],
        sampling: Sampling,
        budget: int,
        emit: Callable[[str], None],
        cancel: threading.Event,
        result: GenerationResult,
    ) -> list[int]:
        """The token loop of `generate`: sample up to `budget` tokens, emit their text, set
        `result.done_reason` / `result.cancelled`; return the generated token ids."""
        import llama_cpp

        llm = self._llm
        vocab = llm._model.vocab
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        stops = StopScanner(sampling.stop)
        output: list[int] = []
        tokens = llm.generate(
            prompt_tokens,
            top_k=sampling.top_k,
            top_p=sampling.top_p,
            min_p=sampling.min_p,
            temp=sampling.temperature,
            repeat_penalty=sampling.repeat_penalty,
            reset=True,
        )
        try:
            for token in tokens:
                output.append(token)
                if llama_cpp.llama_vocab_is_eog(vocab, token):
                    result.done_reason = "stop"
                    break
                text, stopped = stops.feed(decoder.decode(llm.detokenize([token])))
                if text:
                    emit(text)
                if stopped:
                    result.done_reason = "stop"
                    break
                if cancel.is_set():
                    result.cancelled = True
                    break
                if len(output) >= budget:
                    result.done_reason = "length"
                    break
        finally:
            tokens.close()
        if not result.cancelled:  # text held back as a possible stop-string start, or a
            tail = stops.feed(decoder.decode(b"", final=True))[0] + stops.flush()  # torn byte
            if tail:
                emit(tail)
        return output

    @staticmethod
    def _fit_prompt(tokens: list[int], n_ctx: int) -> list[int]:
        """Keep a prompt inside the context like Ollama's default `truncate`: drop the oldest
        tokens (after BOS) so that at least a quarter of the context is left for the answer.
        `prompt_eval_count` then reports the smaller size, which is how a caller can tell."""
        limit = n_ctx - max(1, n_ctx // 4)
        if len(tokens) <= limit:
            return tokens
        return tokens[:1] + tokens[len(tokens) - (limit - 1) :]


@dataclass(frozen=True, slots=True)
class ThreadDefault:
    """The threads llama.cpp runs with when a request sets no num_thread, and why: "the
    physical cores", "the container's CPU quota (2.0 CPUs)" or "the CPUs this process may run
    on (affinity)" — the smallest of the three wins."""

    threads: int
    why: str

    def describe(self) -> str:
        """"2 threads (the physical cores)"."""
        return f"{self.threads} thread{'s' if self.threads != 1 else ''} ({self.why})"


def default_threads(physical: int | None = None, affinity: int | None = None,
                    quota_cpus: float | None = None, *, look: bool = True) -> ThreadDefault:
    """llama.cpp's own default is the physical cores, which in a container with a CPU quota
    (16 host cores, 2.0 CPUs allowed) starts 16 threads that the kernel throttles in turn,
    and under `taskset` more threads than the CPUs allowed. The default here is the smallest
    of: the physical cores, the CPUs of this process's affinity mask, and the cgroup quota
    rounded down (at least 1) — and on a small machine (2 to FEW_CORES = 4 of them) one
    fewer: llama.cpp's threads meet after every layer, so a busy neighbour that takes one CPU
    stalls all of them. Measured on 2 cores (bench/thread_contention.py --neighbour, 3 rounds
    of 16 tokens): quiet, 2 threads 35.1 tok/s and 1 thread 20.6; beside one busy process 2
    threads fell to 14.0 (0.40 of quiet), 1 kept 19.8 (0.96) — the worse case of the two is
    better at 1, and its quiet range was 4 % against 17 %. `--num-thread N` overrides it.
    Arguments left None are read from the machine when `look` (tests pass all three and
    look=False)."""
    if look:
        physical = physical if physical is not None else physical_cores()
        if affinity is None and hasattr(os, "sched_getaffinity"):
            affinity = len(os.sched_getaffinity(0))
        if quota_cpus is None:
            limits = read_limits()
            quota_cpus = limits.cpus if limits is not None else None
    candidates = [(physical, "the physical cores")]
    if affinity:
        candidates.append((affinity, "the CPUs this process may run on (affinity)"))
    if quota_cpus:
        candidates.append((max(1, int(quota_cpus)),
                           f"the container's CPU quota ({quota_cpus:.1f} CPUs)"))
    known = [(n, why) for n, why in candidates if n]
    if not known:
        return ThreadDefault(os.cpu_count() or 1, "the logical CPUs")
    threads, why = min(known, key=lambda c: c[0])  # ties: the first, the physical cores
    if 2 <= threads <= FEW_CORES:
        return ThreadDefault(int(threads) - 1, f"one fewer than {why}, {threads}: a busy "
                             "neighbour would stall a thread on every core")
    return ThreadDefault(int(threads), why)


def physical_cores() -> int:
    """The machine's physical cores (llama.cpp's default thread count here), else the
    logical CPUs when psutil cannot tell."""
    try:
        return psutil.cpu_count(logical=False) or os.cpu_count() or 1
    except (OSError, RuntimeError, psutil.Error):  # psutil cannot read /proc/cpuinfo here
        return os.cpu_count() or 1
