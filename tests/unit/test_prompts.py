"""Random-word prompts and their calibration, against a fake engine with a known token count.

The fake engine's `prompt_eval_count` is an exact function of the prompt's word count, so the
calibration arithmetic can be checked by hand. The real engine is in
tests/integration/test_calibration.py.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable

import pytest

from llmtop.engines.events import Failure, FailureKind, ServerStats, StreamEvent
from llmtop.sessions.measure.prompts import INSTRUCTION, SEPARATOR, PromptGenerator, word_list
from llmtop.sessions.runners.calibration import (
    Calibration,
    CalibrationCache,
    CalibrationError,
    CalibrationPoint,
    calibrate,
    calibration_key,
    predicted_tokens,
)

OPTIONS = {"temperature": 0, "seed": 42, "num_predict": 200, "num_ctx": 4096}


def count_prompt_words(prompt: str) -> int:
    """How many random words a `PromptGenerator` prompt holds (the instruction not counted)."""
    return len(prompt.removesuffix(SEPARATOR + INSTRUCTION).split())


def linear(words: int) -> int:
    """The fake's token count: a 26-token template + instruction, 1.87 tokens per word."""
    return 26 + round(1.87 * words)


class FakeEngine:
    """Stands in for OllamaEngine: `stream_chat` yields one text chunk, then a done event whose
    prompt_eval_count is `tokens(words)`, capped like the embedded engine's truncation
    (num_ctx − num_ctx // 4)."""

    def __init__(
        self,
        tokens: Callable[[int], int] = linear,
        *,
        name: str = "fake",
        failure: Failure | None = None,
    ) -> None:
        self.tokens = tokens
        self.name = name
        self.host = "http://fake:11434"
        self.failure = failure
        self.requests: list[tuple[str, dict, str]] = []  # (model, options, prompt)

    def stream_chat(self, model, messages, *, options=None, think=None, keep_alive=None):
        async def events():
            assert len(messages) == 1 and messages[0]["role"] == "user"
            prompt = messages[0]["content"]
            self.requests.append((model, dict(options or {}), prompt))
            yield StreamEvent(1, content="A")
            if self.failure is not None:
                yield StreamEvent(2, done=True, failure=self.failure)
                return
            tokens = self.tokens(count_prompt_words(prompt))
            ctx = (options or {}).get("num_ctx")
            if ctx:
                tokens = min(tokens, ctx - ctx // 4)
            stats = ServerStats(prompt_eval_count=tokens, eval_count=1, done_reason="length")
            yield StreamEvent(3, done=True, stats=stats)

        return events()


# --------------------------------------------------------------------------- generator


def test_word_list_is_shipped_and_clean():
    words = word_list()
    assert 1000 <= len(words) <= 2000
    assert len(set(words)) == len(words)
    assert all(w.isalpha() and w.islower() and w.isascii() for w in words)


def test_generator_is_repeatable_per_seed():
    a, b, c = PromptGenerator(7), PromptGenerator(7), PromptGenerator(8)
    sizes = [1, 2, 3, 50, 105, 400] * 5
    seq_a = [a.make(n) for n in sizes]
    assert seq_a == [b.make(n) for n in sizes]
    assert seq_a != [c.make(n) for n in sizes]
    # a salt gives an independent stream from the same seed (calibration probes vs the bench)
    assert PromptGenerator(7, salt="calibration").make(50) != PromptGenerator(7).make(50)


def test_exact_word_counts_from_the_list():
    gen, vocab = PromptGenerator(1), set(word_list())
    for n in [1, 2, 3, 4, 10, 105, 777, 3000]:
        prompt = gen.make(n)
        assert prompt.endswith("\n\n" + INSTRUCTION)
        body = prompt.removesuffix("\n\n" + INSTRUCTION).split(" ")
        assert len(body) == n == count_prompt_words(prompt)
        assert set(body) <= vocab
    for bad in (0, -3):
        with pytest.raises(ValueError):
            gen.make(bad)


def test_every_prompt_differs_at_its_start():
    gen = PromptGenerator(42)
    prompts = [gen.make(n) for n in [3, 5, 50, 200] * 250]  # 1000 prompts
    assert len(set(prompts)) == len(prompts)
    heads = [tuple(p.split()[:3]) for p in prompts]
    assert len(set(heads)) == len(heads)  # never the same first 3 words twice
    firsts = [h[0] for h in heads]
    assert all(x != y for x, y in itertools.pairwise(firsts))  # consecutive: word 1
    # short prompts too: 1- and 2-word prompts never repeat either
    short = [gen.make(n) for n in [1, 2] * 200]
    assert len(set(short)) == len(short)


# --------------------------------------------------------------------------- calibration


async def test_calibration_hits_targets_by_measurement():
    engine = FakeEngine()
    cal = await calibrate(engine, "m", [200, 64], OPTIONS, seed=42)
    # Anchors: 1 word → 26 + round(1.87) = 28; 50 words → 26 + round(93.5) = 120.
    # Tokens per word = (120 − 28) / 49 = 1.8776; template = round(28 − 1.8776) = 26.
    assert cal.template_tokens == 26
    assert cal.probes[:2] == ((1, 28), (50, 120))
    # 64: line through the anchors, a = 26.122 → (64 − 26.122) / 1.8776 = 20.17 → 20 words,
    #     f(20) = 26 + round(37.4) = 63 tokens: 1.6 % under 64, inside ±5 %.
    assert cal.targets[64] == CalibrationPoint(words=20, tokens=63)
    # 200: least squares over (1,28) (50,120) (20,63): b = 2294.33 / 1220.67 = 1.8796,
    #      a = 70.333 − 1.8796 × 23.667 = 25.849 → (200 − 25.849) / 1.8796 = 92.65 → 93 words,
    #      f(93) = 26 + round(173.91) = 200 tokens: exact.
    assert cal.targets[200] == CalibrationPoint(words=93, tokens=200)
    assert len(cal.probes) == len(engine.requests) == 4  # one probe per target, none wasted
    assert not cal.from_cache and cal.model == "m" and cal.engine_host == engine.host
    # probes: the run's options but num_predict 1, a fresh prompt every time
    assert all(opts == {**OPTIONS, "num_predict": 1} for _, opts, _ in engine.requests)
    assert len({p for _, _, p in engine.requests}) == len(engine.requests)
    for target, point in cal.targets.items():
        assert abs(point.tokens - target) <= 0.05 * target


async def test_calibration_steps_when_the_first_guess_misses():
    # tokens per word grows with length, so the straight line from the anchors undershoots
    def curved(words: int) -> int:
        return 26 + round(1.5 * words + 0.004 * words * words)

    engine = FakeEngine(curved)
    cal = await calibrate(engine, "m", [1000, 300], OPTIONS, seed=3)
    for target, point in cal.targets.items():
        assert curved(point.words) == point.tokens
        assert abs(point.tokens - target) <= 0.05 * target
    assert len(cal.probes) > 4  # it needed more than one probe per target
    assert cal.probes == tuple((w, curved(w)) for w, _ in cal.probes)


async def test_calibration_with_uneven_words():
    # a realistic tokenizer stand-in: long words cost 2 tokens, short ones 1
    def uneven(prompt_words: list[str]) -> int:
        return 20 + sum(2 if len(w) > 6 else 1 for w in prompt_words)

    class Uneven(FakeEngine):
        def stream_chat(self, model, messages, *, options=None, think=None, keep_alive=None):
            words = messages[0]["content"].removesuffix("\n\n" + INSTRUCTION).split()
            self.tokens = lambda _n: uneven(words)
            return super().stream_chat(model, messages, options=options)

    cal = await calibrate(Uneven(), "m", [64, 200, 700], OPTIONS, seed=11, tolerance=0.02)
    for target, point in cal.targets.items():
        assert abs(point.tokens - target) <= 0.02 * target


async def test_unreachable_target_names_num_ctx():
    engine = FakeEngine()  # num_ctx 4096 → the fake evaluates at most 4096 − 1024 = 3072 tokens
    with pytest.raises(CalibrationError) as err:
        await calibrate(engine, "m", [9000], OPTIONS, seed=1)
    msg = str(err.value)
    assert "target 9000 tokens exceeds what the engine evaluated (3072)" in msg
    assert "--num-ctx" in msg and "num_ctx=4096" in msg
    assert len(engine.requests) <= 5  # it noticed the stall quickly


async def test_target_below_template_cost():
    with pytest.raises(CalibrationError, match="below the prompt's fixed cost"):
        await calibrate(FakeEngine(), "m", [10], OPTIONS, seed=1)


async def test_failed_probe_raises_with_its_message():
    failure = Failure(
        FailureKind.MODEL_NOT_FOUND, "model 'nope' not found at http://fake", "pull it"
    )
    with pytest.raises(CalibrationError, match="model 'nope' not found at http://fake"):
        await calibrate(FakeEngine(failure=failure), "nope", [64], OPTIONS, seed=1)


async def test_missing_prompt_eval_count_raises():
    class Silent(FakeEngine):
        def stream_chat(self, model, messages, *, options=None, think=None, keep_alive=None):
            async def events():
                yield StreamEvent(3, done=True, stats=ServerStats())

            return events()

    with pytest.raises(CalibrationError, match="prompt_eval_count"):
        await calibrate(Silent(), "m", [64], OPTIONS, seed=1)


async def test_bad_arguments():
    for targets in ([], [0], [64, -1]):
        with pytest.raises(ValueError):
            await calibrate(FakeEngine(), "m", targets, OPTIONS, seed=1)


# --------------------------------------------------------------------------- cache


async def test_cache_round_trip_sets_from_cache(tmp_path):
    cache = CalibrationCache(tmp_path / "sub" / "calibration.json")
    first = await calibrate(FakeEngine(), "m", [64, 200], OPTIONS, seed=42, cache=cache)
    assert not first.from_cache and cache.path.exists()
    assert Calibration.from_dict(json.loads(json.dumps(first.to_dict()))) == first

    engine = FakeEngine()
    # num_ctx and sampling do not change tokenization: still the same cache entry
    second = await calibrate(
        engine, "m", [200, 64], {**OPTIONS, "num_ctx": 8192}, seed=42, cache=cache
    )
    assert second.from_cache
    assert second.targets == first.targets and second.template_tokens == 26
    assert len(engine.requests) == 1  # one verifying probe, at the largest target (200)
    assert count_prompt_words(engine.requests[0][2]) == first.targets[200].words

    # another model or engine kind or digest is another entry
    other = FakeEngine(name="ollama")
    assert not (await calibrate(other, "m", [64], OPTIONS, seed=42, cache=cache)).from_cache
    assert not (
        await calibrate(FakeEngine(), "m", [64], OPTIONS, seed=42, cache=cache, digest="abc")
    ).from_cache
    assert calibration_key("fake", "m") != calibration_key("fake", "m2")


async def test_cache_adds_missing_targets(tmp_path):
    cache = CalibrationCache(tmp_path / "calibration.json")
    await calibrate(FakeEngine(), "m", [64], OPTIONS, seed=42, cache=cache)
    engine = FakeEngine()
    cal = await calibrate(engine, "m", [64, 500], OPTIONS, seed=42, cache=cache)
    assert cal.from_cache and set(cal.targets) == {64, 500}
    assert abs(cal.targets[500].tokens - 500) <= 25
    stored = cache.load(calibration_key("fake", "m"))
    assert stored is not None and set(stored.targets) == {64, 500} and not stored.from_cache


async def test_stale_cache_is_recalibrated(tmp_path):
    cache = CalibrationCache(tmp_path / "calibration.json")
    await calibrate(FakeEngine(), "m", [64, 200], OPTIONS, seed=42, cache=cache)

    def denser(words: int) -> int:  # the model changed under the same tag
        return 40 + round(2.5 * words)

    engine = FakeEngine(denser)
    cal = await calibrate(engine, "m", [64, 200], OPTIONS, seed=42, cache=cache)
    assert not cal.from_cache
    assert cal.template_tokens == round(denser(1) - (denser(50) - denser(1)) / 49)  # 40
    for target, point in cal.targets.items():
        assert point.tokens == denser(point.words) and abs(point.tokens - target) <= 0.05 * target
    assert cache.load(cal.options_key).targets == cal.targets  # the cache was rewritten


@pytest.mark.parametrize("content", ["{not json", "[]", '{"format": 1, "entries": {"x": 3}}', ""])
async def test_corrupt_cache_is_ignored_and_rewritten(tmp_path, content):
    path = tmp_path / "calibration.json"
    path.write_text(content)
    cache = CalibrationCache(path)
    cal = await calibrate(FakeEngine(), "m", [64], OPTIONS, seed=42, cache=cache)
    assert not cal.from_cache and cal.targets[64].words == 20
    data = json.loads(path.read_text())
    assert data["format"] == 1 and cal.options_key in data["entries"]


async def test_malformed_entry_is_ignored(tmp_path):
    cache = CalibrationCache(tmp_path / "calibration.json")
    key = calibration_key("fake", "m")
    bad = {
        "format": 1,
        "entries": {key: {"calibration_format": 1, "targets": {"64": {"words": "x"}}}},
    }
    cache.path.write_text(json.dumps(bad))
    assert cache.load(key) is None
    assert not (await calibrate(FakeEngine(), "m", [64], OPTIONS, seed=42, cache=cache)).from_cache
    assert cache.load(key) is not None


async def test_unwritable_cache_is_not_fatal(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cache = CalibrationCache(blocker / "calibration.json")  # its folder cannot be created
    cal = await calibrate(FakeEngine(), "m", [64], OPTIONS, seed=42, cache=cache)
    assert cal.targets[64].tokens == 63 and cache.load(cal.options_key) is None


# --------------------------------------------------------------------------- prediction


async def test_predicted_tokens_interpolates_the_probe_table():
    cal = await calibrate(FakeEngine(), "m", [64, 200], OPTIONS, seed=42)
    # table (1,28) (20,63) (50,120) (93,200): 35 words lies between 20 and 50 →
    # 63 + (120 − 63) × 15 / 30 = 91.5 (the fake's own f(35) = 91)
    assert predicted_tokens(cal, 35) == pytest.approx(91.5)
    assert predicted_tokens(cal, 93) == pytest.approx(200)
    assert predicted_tokens(cal, 200) == pytest.approx(linear(200), rel=0.02)  # extrapolated
