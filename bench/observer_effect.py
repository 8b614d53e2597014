"""Does watching the machine slow the model? Decode rate and TTFT with the probe sampler off
and on, interleaved in one run on the embedded engine.

    python bench/observer_effect.py [--pairs 12] [--interval 0.5] [--num-predict 64]

Each pair runs one request with no sampler and one with a `ProbeSampler` at `--interval`
seconds (what `llmtop bench` and a streaming TUI use), in alternating order, with fresh
random-word prompts of the same size. Prints the medians side by side, the median of the
paired ratios (on / off), and the sampler's own CPU per sample. The engine is a child process
started here, so the sampler's CPU competes with it exactly as in a real session.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys

from llmtop.engines.ollama import OllamaEngine
from llmtop.probes.sampler import ProbeSampler
from llmtop.servers.child import EmbeddedProcess
from llmtop.sessions.measure.prompts import PromptGenerator
from llmtop.sessions.measure.request import RequestCollector, chat_messages, run_request

MODEL = "gemma3:270m"


async def one(
    engine: OllamaEngine, prompt: str, options: dict
) -> tuple[float | None, float | None]:
    collector = RequestCollector(prompt=prompt, options=options, model=MODEL)
    result = await run_request(
        lambda: engine.stream_chat(MODEL, chat_messages(prompt), options=options), collector
    )
    return result.metrics.server_decode_tps, result.metrics.ttft_ms


async def main(args: argparse.Namespace) -> int:
    proc = EmbeddedProcess()
    await proc.start()
    engine = OllamaEngine(proc.host, name="embedded")
    options = {"temperature": 0, "seed": 42, "num_predict": args.num_predict, "num_ctx": 2048}
    prompts = PromptGenerator(seed=7)
    random.seed(7)
    costs: list[float] = []
    sampler = ProbeSampler(args.interval, lambda s: costs.append(s.cost_ms), engine_pids={proc.pid})
    off: list[tuple[float | None, float | None]] = []
    on: list[tuple[float | None, float | None]] = []
    try:
        await one(engine, prompts.make(40), options)  # warm-up: loads the model
        for i in range(args.pairs):
            for watched in ((False, True) if i % 2 == 0 else (True, False)):
                if watched:
                    sampler.start()
                    # past its first (warm-up) sample, at a random phase: in a real session the
                    # samples fall anywhere in a request, not always at its start
                    await asyncio.sleep(args.interval * (1 + random.random()))
                result = await one(engine, prompts.make(40), options)
                if watched:
                    sampler.stop()
                    sampler = ProbeSampler(
                        args.interval, lambda s: costs.append(s.cost_ms), engine_pids={proc.pid}
                    )
                (on if watched else off).append(result)
    finally:
        await engine.aclose()
        proc.stop()

    def med(rows: list[tuple[float | None, float | None]], k: int) -> float:
        return statistics.median(r[k] for r in rows if r[k] is not None)

    ratios = [a[0] / b[0] for a, b in zip(on, off, strict=True) if a[0] and b[0]]
    print(
        f"pairs {args.pairs}, sampler every {args.interval} s, {args.num_predict} tokens per "
        "request"
    )
    print(f"  decode tok/s (server) median: off {med(off, 0):.2f} | on {med(on, 0):.2f}")
    print(f"  TTFT ms median:               off {med(off, 1):.2f} | on {med(on, 1):.2f}")
    print(f"  paired decode ratio on/off: median {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
    if costs:
        print(
            f"  sampler CPU per sample: median {statistics.median(costs):.1f} ms over {len(costs)} "
            "samples "
            f"= {statistics.median(costs) / (args.interval * 1000) * 100:.1f} % of one core"
        )
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=12)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--num-predict", type=int, default=64)
    sys.exit(asyncio.run(main(ap.parse_args())))
