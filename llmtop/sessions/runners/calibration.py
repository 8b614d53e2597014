"""Calibration of prompt sizes against the server's own token count, cached on disk.

docs/method.md, "Calibration": token counts are measured, never estimated from words. `calibrate`
finds, for each target prompt size in tokens, the word count whose server-reported
`prompt_eval_count` lands within a tolerance of the target, by sending short probe requests
(the bench's options with `num_predict` 1, one fresh `PromptGenerator` prompt each) and
stepping the word count until the measurement hits. An engine whose streams carry no
prompt count (llama-cpp-python's OpenAI server) is asked for it with `count_prompt_tokens`
(the server's usage of a non-streamed request: `llmtop.engines.openai`). Results are cached per
engine kind +
model (+ digest) in `<user cache dir>/llmtop/calibration.json`; a cached calibration is still
checked with one probe before it is trusted. `predicted_tokens` reads a calibration's probe
table back as a prediction.

No Textual here.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import platformdirs

from llmtop.engines.base import Engine, EngineError
from llmtop.engines.events import FailureKind, StreamEvent
from llmtop.files import write_atomically
from llmtop.sessions.measure.prompts import PromptGenerator, prompt_format_id
from llmtop.sessions.measure.request import chat_messages

ANCHOR_WORDS = 50  # the word count of the probe that measures tokens per word
CALIBRATION_FORMAT = 1
CACHE_FORMAT = 1
# A probe is "stalled" (the server truncated it) when `STALL_MIN_EXPECTED` or more tokens of
# growth were expected from its extra words and under `STALL_FRACTION` of them arrived.
STALL_MIN_EXPECTED = 32
STALL_FRACTION = 0.25


# --------------------------------------------------------------------------- records


class CalibrationError(Exception):
    """Calibration could not reach a target; the message says which, why and what to do."""


@dataclass(frozen=True, slots=True)
class CalibrationPoint:
    """The word count chosen for one target, and the tokens (server `prompt_eval_count`) its
    accepting probe measured."""

    words: int
    tokens: int


@dataclass(frozen=True)
class Calibration:
    """Word counts that hit target prompt sizes in tokens, as measured on one engine + model.

    engine_host: the URL the probes went to. model: the model tag.
    options_key: the cache key (engine kind, model, digest, think, prompt format).
    template_tokens: tokens the server counts besides the random words (chat template +
    `INSTRUCTION`): the intercept of the 1-word and 50-word probes, t(1) − tokens-per-word.
    targets: target tokens → CalibrationPoint(words, measured tokens).
    probes: every probe in order, (words, prompt_eval_count).
    from_cache: True when the points came from the cache (after one verifying probe).
    """

    engine_host: str
    model: str
    options_key: str
    template_tokens: int
    targets: dict[int, CalibrationPoint]
    probes: tuple[tuple[int, int], ...]
    from_cache: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (target keys become strings, as JSON requires)."""
        return {
            "calibration_format": CALIBRATION_FORMAT,
            "engine_host": self.engine_host,
            "model": self.model,
            "options_key": self.options_key,
            "template_tokens": self.template_tokens,
            "targets": {
                str(t): {"words": p.words, "tokens": p.tokens}
                for t, p in sorted(self.targets.items())
            },
            "probes": [[w, t] for w, t in self.probes],
            "from_cache": self.from_cache,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Calibration:
        """Inverse of `to_dict`. Raises ValueError for anything malformed."""
        try:
            if data.get("calibration_format") != CALIBRATION_FORMAT:
                found = data.get("calibration_format")
                raise ValueError(f"unsupported calibration format {found!r}")
            targets = {
                _int(t): CalibrationPoint(_int(p["words"]), _int(p["tokens"]))
                for t, p in dict(data["targets"]).items()
            }
            probes = tuple((_int(w), _int(t)) for w, t in data["probes"])
            return cls(
                engine_host=str(data["engine_host"]),
                model=str(data["model"]),
                options_key=str(data["options_key"]),
                template_tokens=_int(data["template_tokens"]),
                targets=targets,
                probes=probes,
                from_cache=bool(data.get("from_cache", False)),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"malformed calibration record: {exc!r}") from exc


def _int(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(f"expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise ValueError(f"expected an integer, got {value!r}")


def calibration_key(
    engine_name: str, model: str, *, digest: str | None = None, think: bool | str | None = None
) -> str:
    """The cache key: what changes how a prompt tokenizes or is templated.

    engine_name ("ollama"/"embedded"), model tag, model digest when known, the think setting
    (a thinking template may differ) and `prompt_format_id()`. Not the host (the embedded
    engine gets a new port each run) and not num_ctx/sampling options (they do not change
    tokenization; a context too small for a cached target is caught by the verifying probe).
    """
    return (
        f"{engine_name}|{model}|digest={digest or '-'}|think={think}|prompts={prompt_format_id()}"
    )


# --------------------------------------------------------------------------- cache


def default_cache_path() -> Path:
    """<user cache dir>/llmtop/calibration.json (platformdirs)."""
    return Path(platformdirs.user_cache_dir("llmtop")) / "calibration.json"


class CalibrationCache:
    """Calibrations on disk, one entry per `calibration_key`, JSON.

    path: the file (default `default_cache_path()`). A missing, unreadable or corrupt file is
    treated as empty and rewritten on the next `store`; a write that fails (read-only disk) is
    skipped. Neither is ever fatal: the cache only saves probe requests.
    """

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else default_cache_path()

    def _entries(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
            return {}
        entries = data.get("entries")
        return dict(entries) if isinstance(entries, dict) else {}

    def load(self, key: str) -> Calibration | None:
        """The cached calibration for `key`, or None (absent or malformed)."""
        raw = self._entries().get(key)
        if not isinstance(raw, dict):
            return None
        try:
            return Calibration.from_dict(raw)
        except ValueError:
            return None

    def store(self, calibration: Calibration) -> bool:
        """Save (replace) the entry for `calibration.options_key`; True when written."""
        entries = self._entries()
        entries[calibration.options_key] = replace(calibration, from_cache=False).to_dict()
        text = json.dumps({"format": CACHE_FORMAT, "entries": entries}, indent=1, sort_keys=True)
        return write_atomically(self.path, text)


# --------------------------------------------------------------------------- calibration


@dataclass
class _Prober:
    """Sends probe requests and keeps the table of every probe (words, prompt_eval_count)."""

    engine: Engine
    model: str
    options: dict[str, Any]
    think: bool | str | None
    generator: PromptGenerator
    probes: list[tuple[int, int]] = field(default_factory=list)

    async def probe(self, words: int) -> int:
        """One request with a fresh `words`-word prompt; returns the server's prompt_eval_count."""
        prompt = self.generator.make(words)
        stream = self.engine.stream_chat(
            self.model, chat_messages(prompt), options=self.options, think=self.think
        )
        final: StreamEvent | None = None
        async with contextlib.aclosing(stream):
            async for event in stream:
                if event.done:
                    final = event
                    break
        if final is None:
            raise CalibrationError(
                f"calibration probe ({words} words) to {self.engine.host}: "
                "the stream ended without a done chunk"
            )
        if final.failure is not None:
            failure = final.failure
            if failure.kind == FailureKind.BAD_REQUEST and "num_ctx" in failure.message:
                # an engine that refuses a prompt longer than its context (llmtop's own does)
                raise CalibrationError(
                    f"a {words}-word calibration probe does not fit the context "
                    f"({failure.message}); raise --num-ctx "
                    f"(options num_ctx={self.options.get('num_ctx')}) or ask for smaller "
                    "--prompt-tokens")
            raise CalibrationError(f"calibration probe ({words} words) failed: {failure}")
        tokens = final.stats.prompt_eval_count if final.stats is not None else None
        count = getattr(self.engine, "count_prompt_tokens", None)
        if tokens is None and count is not None:
            tokens = await self._counted(count, words, prompt)
        if tokens is None:
            raise CalibrationError(
                f"{self.engine.host} did not report prompt_eval_count for a {words}-word probe: "
                "calibration needs the server's own token count"
            )
        self.probes.append((words, tokens))
        return tokens


    async def _counted(self, count: Any, words: int, prompt: str) -> int:
        """The server's count of the probe's prompt when its stream carried none (an OpenAI
        server without usage in streams: `count_prompt_tokens`, its non-streamed usage)."""
        try:
            return int(await count(self.model, chat_messages(prompt)))
        except EngineError as exc:
            raise CalibrationError(
                f"calibration probe ({words} words): counting its tokens failed: {exc.failure}"
            ) from exc


def _within(tokens: int, target: int, tolerance: float) -> bool:
    return abs(tokens - target) <= tolerance * target


def _rising_line(points: Sequence[tuple[int, int]]) -> tuple[float, float] | None:
    """The least-squares line tokens = intercept + slope·words through (words, tokens) `points`
    (`statistics.linear_regression`), as (intercept, slope); None when the word counts never
    vary or the slope is not positive (more words must mean more tokens)."""
    if len({w for w, _ in points}) < 2:
        return None
    slope, intercept = statistics.linear_regression([w for w, _ in points], [t for _, t in points])
    return (intercept, slope) if slope > 0 else None


def _truncated_msg(
    target: int, probes: Sequence[tuple[int, int]], options: Mapping[str, Any]
) -> str:
    most = max(t for _, t in probes)
    ctx = options.get("num_ctx")
    now = (
        f" (options num_ctx={ctx})"
        if ctx is not None
        else " (options num_ctx not set: the server's default)"
    )
    return (
        f"target {target} tokens exceeds what the engine evaluated ({most}): the server truncated "
        f"longer prompts to fit its context; raise --num-ctx{now}"
    )


def _stalled(words: int, tokens: int, earlier: Sequence[tuple[int, int]], slope: float) -> bool:
    """True when `words` words gave (almost) no more tokens than a probe with fewer words did,
    although the extra words should have added ≥ STALL_MIN_EXPECTED tokens: truncation."""
    for w, t in earlier:
        expected = slope * (words - w)
        if w < words and expected >= STALL_MIN_EXPECTED and tokens - t < STALL_FRACTION * expected:
            return True
    return False


async def _search(
    prober: _Prober,
    target: int,
    *,
    slope0: float,
    tolerance: float,
    max_rounds: int,
    options: Mapping[str, Any],
) -> CalibrationPoint:
    """Probe word counts until one measures `target` ± tolerance; at most `max_rounds` probes.

    The first guess comes from a least-squares line through the probes so far; each next guess
    steps from the last probe: by regula falsi between the nearest probes below and above the
    target when both exist, else proportionally with the local slope (tokens per word).
    """
    smallest = min(prober.probes)
    if smallest[0] == 1 and target < smallest[1] * (1 - tolerance):
        raise CalibrationError(
            f"target {target} tokens is below the prompt's fixed cost: a 1-word prompt already "
            f"measured {smallest[1]} tokens (chat template + instruction)"
        )
    a, b = _rising_line(prober.probes) or (smallest[1] - slope0 * smallest[0], slope0)
    w = max(1, round((target - a) / b))
    for _ in range(max_rounds):
        earlier = list(prober.probes)
        t = await prober.probe(w)
        if _within(t, target, tolerance):
            return CalibrationPoint(w, t)
        if t < target and _stalled(w, t, earlier, slope0):
            raise CalibrationError(_truncated_msg(target, prober.probes, options))
        w = _next_words(prober.probes, w, t, target, slope0)
    closest = min(prober.probes, key=lambda p: abs(p[1] - target))
    raise CalibrationError(
        f"could not reach target {target} tokens within ±{tolerance:.0%} in {max_rounds} probes "
        f"(closest: {closest[0]} words → {closest[1]} tokens); the token count per word is too "
        "uneven for this tolerance: raise max_rounds or the tolerance"
    )


def _next_words(
    probes: Sequence[tuple[int, int]], w: int, t: int, target: int, slope0: float
) -> int:
    below = [p for p in probes if p[1] < target]
    above = [p for p in probes if p[1] > target]
    if below and above:
        lo = max(below, key=lambda p: (p[1], -p[0]))
        hi = min(above, key=lambda p: (p[1], p[0]))
        if hi[0] > lo[0]:
            guess = lo[0] + (target - lo[1]) * (hi[0] - lo[0]) / (hi[1] - lo[1])
            nxt = round(guess)
            if nxt == w:  # a fresh prompt at the same count is fine, but prefer a new count
                nxt = w + (1 if t < target else -1)
            return max(lo[0], min(hi[0], max(1, nxt)))
    # proportional step with the local slope (the probes nearest in words), else the anchors'
    others = sorted((p for p in probes if p[0] != w), key=lambda p: abs(p[0] - w))
    slope = slope0
    if others:
        ow, ot = others[0]
        local = (t - ot) / (w - ow)
        if abs(w - ow) >= 5 and local > STALL_FRACTION * slope0:
            slope = local
    nxt = round(w + (target - t) / slope)
    if nxt == w:
        nxt = w + (1 if t < target else -1)
    return max(1, max(w // 2, min(2 * w, nxt)))


@dataclass
class _Start:
    """Where the target searches start: the template cost, the tokens per word, the points
    already known (from the cache) and the cached targets to keep when storing."""

    template_tokens: int
    slope: float
    points: dict[int, CalibrationPoint]
    from_cache: bool
    kept: dict[int, CalibrationPoint] = field(default_factory=dict)


def _wanted(targets: Iterable[int], tolerance: float) -> list[int]:
    """The targets to calibrate, sorted once each. Raises ValueError for none, one that is
    not a positive int, or a tolerance outside (0, 1)."""
    wanted = sorted(set(targets))
    if not wanted or any(not isinstance(t, int) or isinstance(t, bool) or t < 1 for t in wanted):
        raise ValueError(f"calibration targets must be positive token counts, got {wanted!r}")
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance must be between 0 and 1, got {tolerance!r}")
    return wanted


async def calibrate(
    engine: Engine,
    model: str,
    targets: Iterable[int],
    options: Mapping[str, Any],
    *,
    seed: int,
    tolerance: float = 0.05,
    max_rounds: int = 8,
    cache: CalibrationCache | None = None,
    digest: str | None = None,
    think: bool | str | None = None,
) -> Calibration:
    """Measure, for each target prompt size (tokens), the word count that hits it.

    engine: an `OllamaEngine` (anything with `host`, `name`, `stream_chat`). Probes are chat
    requests with one user message from `PromptGenerator(seed, salt="calibration")` — the
    bench's request shape — with `options` but `num_predict` 1; tokens are the final event's
    `stats.prompt_eval_count`. tolerance: allowed relative miss (0.05 = ±5 %). max_rounds:
    probes per target after the first two. digest / think: extra cache-key parts.

    Cached (`_from_cache`): reuse the stored points after ONE probe at the largest cached
    requested target lands within tolerance (else calibrate fresh). Fresh (`_fresh`): probe
    1 word and `ANCHOR_WORDS` words (template cost, tokens per word). Either way, every target
    without a point is then searched (`_search`) and the result stored in `cache`.

    Raises CalibrationError: a failed probe (the failure's message), a target the server
    truncates (names num_ctx), a target below the fixed template cost, or no hit in
    `max_rounds`. ValueError for no targets or a non-positive one.
    """
    wanted = _wanted(targets, tolerance)
    probe_options = {**dict(options), "num_predict": 1}
    key = calibration_key(engine.name, model, digest=digest, think=think)
    prober = _Prober(engine, model, probe_options, think, PromptGenerator(seed, salt="calibration"))
    cached = cache.load(key) if cache is not None else None
    start = await _from_cache(prober, cached, wanted, tolerance) or await _fresh(prober, options)
    points = dict(start.points)
    for target in wanted:
        if target not in points:
            points[target] = await _search(prober, target, slope0=start.slope,
                                           tolerance=tolerance, max_rounds=max_rounds,
                                           options=probe_options)
    result = Calibration(
        engine_host=engine.host,
        model=model,
        options_key=key,
        template_tokens=start.template_tokens,
        targets=dict(sorted(points.items())),
        probes=tuple(prober.probes),
        from_cache=start.from_cache,
    )
    if cache is not None:
        cache.store(replace(result, targets={**start.kept, **result.targets}))
    return result


async def _from_cache(
    prober: _Prober, cached: Calibration | None, wanted: Sequence[int], tolerance: float
) -> _Start | None:
    """Trust `cached` after one probe at its largest wanted target measures that target within
    `tolerance`; None (and a cleared probe table) when there is nothing to check or it fails."""
    if cached is None or not any(t in cached.targets for t in wanted):
        return None
    check = max(t for t in wanted if t in cached.targets)
    tokens = await prober.probe(cached.targets[check].words)
    if not _within(tokens, check, tolerance):
        prober.probes.clear()  # the cache was stale: start over, as if there were none
        return None
    prober.probes[:0] = cached.probes  # the table the searches for missing targets start from
    line = _rising_line(cached.probes)
    return _Start(
        template_tokens=cached.template_tokens,
        slope=line[1] if line is not None else 1.0,
        points={t: cached.targets[t] for t in wanted if t in cached.targets},
        from_cache=True,
        kept=dict(cached.targets),
    )


async def _fresh(prober: _Prober, options: Mapping[str, Any]) -> _Start:
    """Probe 1 word and `ANCHOR_WORDS` words: tokens per word is the slope between them, the
    template cost t(1) − slope. Raises CalibrationError when the longer prompt did not grow."""
    t1 = await prober.probe(1)
    t_anchor = await prober.probe(ANCHOR_WORDS)
    slope = (t_anchor - t1) / (ANCHOR_WORDS - 1)
    if slope <= 0:
        raise CalibrationError(
            f"{ANCHOR_WORDS} words measured {t_anchor} tokens, 1 word {t1}: the prompt did not "
            "grow, so the server truncated it; raise --num-ctx "
            f"(options num_ctx={options.get('num_ctx')})"
        )
    return _Start(max(0, round(t1 - slope)), slope, {}, from_cache=False)


# --------------------------------------------------------------------------- prediction


def predicted_tokens(calibration: Calibration, words: int) -> float:
    """The prompt_eval_count calibration predicts for a `words`-word prompt (tokens, float).

    Piecewise-linear interpolation of the probe table (probes at the same word count are
    averaged); outside the table, the nearest end extended with the table's least-squares
    tokens per word (flat when that slope is not positive). For word counts between the
    calibrated targets; the bench itself checks each request against its target's measured
    tokens (analysis/run.py `first_pass_status`). Raises ValueError for a table without probes.
    """
    by_words: dict[int, list[int]] = {}
    for w, t in calibration.probes:
        by_words.setdefault(w, []).append(t)
    table = sorted((w, sum(ts) / len(ts)) for w, ts in by_words.items())
    if not table:
        raise ValueError("the calibration has no probes to predict from")
    line = _rising_line(calibration.probes)
    slope = line[1] if line is not None else 0.0
    if words <= table[0][0]:
        return table[0][1] + slope * (words - table[0][0])
    if words >= table[-1][0]:
        return table[-1][1] + slope * (words - table[-1][0])
    for (w0, t0), (w1, t1) in itertools.pairwise(table):
        if w0 <= words <= w1:
            return t0 + (t1 - t0) * (words - w0) / (w1 - w0)
    return math.nan  # unreachable: the table covers every word count in its range
