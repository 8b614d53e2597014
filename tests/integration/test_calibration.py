"""Calibration against the real embedded engine (llama.cpp + Gemma 3 270M): the word counts it
picks must make the server itself count the target number of prompt tokens."""

from __future__ import annotations

from time import perf_counter

import pytest

from llmtop.engines.ollama import OllamaEngine
from llmtop.sessions.measure.prompts import PromptGenerator
from llmtop.sessions.measure.request import chat_messages
from llmtop.sessions.runners.calibration import (
    CalibrationCache,
    CalibrationError,
    calibrate,
    predicted_tokens,
)
from tests.conftest import MODEL

pytestmark = pytest.mark.integration
OPTIONS = {"temperature": 0, "seed": 42, "num_ctx": 2048}
TARGETS = [64, 200]


async def test_calibration_hits_targets_on_the_real_engine(engine_url, tmp_path):
    engine = OllamaEngine(engine_url, name="embedded")
    try:
        cache = CalibrationCache(tmp_path / "calibration.json")
        start = perf_counter()
        cal = await calibrate(engine, MODEL, TARGETS, OPTIONS, seed=42, cache=cache)
        seconds = perf_counter() - start
        print(
            f"\ncalibration {MODEL}: template {cal.template_tokens} tokens, "
            f"{len(cal.probes)} probes in {seconds:.2f} s"
        )
        print("probes (words → prompt_eval_count):", ", ".join(f"{w}→{t}" for w, t in cal.probes))
        for target, point in cal.targets.items():
            print(f"target {target}: {point.words} words → {point.tokens} tokens")

        assert not cal.from_cache
        assert 0 < cal.template_tokens < 40  # chat template + the closing instruction
        for target in TARGETS:
            point = cal.targets[target]
            assert abs(point.tokens - target) <= 0.05 * target, (target, point)
        assert len(cal.probes) <= 2 + 8 * len(TARGETS)

        # The same word count with a fresh prompt counts (nearly) the same on the server, and
        # the bench's prompts are not the calibration's.
        bench = PromptGenerator(42)
        prompt = bench.make(cal.targets[200].words)
        events = [
            e
            async for e in engine.stream_chat(
                MODEL, chat_messages(prompt), options={**OPTIONS, "num_predict": 1}
            )
        ]
        tokens = events[-1].stats.prompt_eval_count
        print(f"bench-style prompt of {cal.targets[200].words} words → {tokens} tokens")
        assert abs(tokens - 200) <= 0.10 * 200
        assert tokens >= 0.85 * predicted_tokens(cal, cal.targets[200].words)  # not truncated
        assert predicted_tokens(cal, cal.targets[64].words) == pytest.approx(64, rel=0.1)

        # Second run: from the cache, after one verifying probe.
        start = perf_counter()
        again = await calibrate(engine, MODEL, TARGETS, OPTIONS, seed=42, cache=cache)
        print(
            f"cached: {len(again.probes) - len(cal.probes)} probe in {perf_counter() - start:.2f} s"
        )
        assert again.from_cache and again.targets == cal.targets
        assert len(again.probes) == len(cal.probes) + 1
    finally:
        await engine.aclose()


async def test_target_over_the_context_names_num_ctx(engine_url):
    engine = OllamaEngine(engine_url, name="embedded")
    try:
        with pytest.raises(CalibrationError, match="num-ctx") as err:
            await calibrate(engine, MODEL, [3000], {**OPTIONS, "num_ctx": 1024}, seed=1)
        print("\n" + str(err.value))
        assert "num_ctx=1024" in str(err.value)
    finally:
        await engine.aclose()
