"""llmtop beside a peer benchmark tool, both against the same truth server.

    python bench/peers.py [--peer guidellm] [--requests 20] [--first-ms 100] [--chunks 50]
                          [--gap-ms 10] [--venv /tmp/llmtop-peers-venv] [--json FILE]

The truth server (bench/truth_server.py, a child process) logs on the shared monotonic clock
when each request had arrived, when its first text chunk left and when its done chunk left.
So for every request the truth is known: TTFT = first − arrival, the per-token time
(done − first) / chunks (the server sleeps `--gap-ms` before each later chunk and before the
done), E2E = done − arrival. Each tool then streams `--requests` requests one at a time
(synchronous: nothing queues) over `/v1/chat/completions`, and the table gives each tool's
TTFT, ITL/TPOT and throughput in *its own* definitions (docs/guide/peers.md) and its error
against the truth of the requests it sent (truth records from its time window).

The peer is installed by this script into a throwaway virtualenv (`--venv`, under /tmp;
never a project dependency; it needs PyPI through pip), with the `gguf` package so that a
tokenizer can be made from llmtop's bundled GGUF (the peer needs one to size its prompts).
Not part of `make bench` (network). Supported peers: guidellm.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from llmtop.engines.openai import OpenAIEngine
from llmtop.servers.child import free_port
from llmtop.sessions.measure.request import RequestCollector, chat_messages, run_request

HERE = Path(__file__).resolve().parent
MODEL = "truth:latest"
PEER_PACKAGES = {"guidellm": ["guidellm", "gguf", "sentencepiece", "protobuf"]}


class Truth:
    """The truth server as a child process; `since(t_ns)` reads the requests it logged after
    a moment of the shared clock."""

    def __init__(self, folder: str, first_ms: float, chunks: int, gap_ms: float) -> None:
        self.log = Path(folder) / "truth.jsonl"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.chunks = chunks
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "truth_server.py"), str(self.port), str(self.log),
             "--first-ms", str(first_ms), "--chunks", str(chunks), "--gap-ms", str(gap_ms)],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def since(self, t_ns: int) -> list[dict[str, float]]:
        """Truth per request received after `t_ns`: ttft, per_token, e2e (ms)."""
        out = []
        for line in self.log.read_text().splitlines():
            r = json.loads(line)
            if r["recv_ns"] < t_ns:
                continue
            out.append({"ttft": (r["first_ns"] - r["recv_ns"]) / 1e6,
                        "per_token": (r["done_ns"] - r["first_ns"]) / 1e6 / self.chunks,
                        "e2e": (r["done_ns"] - r["recv_ns"]) / 1e6})
        return out

    def stop(self) -> None:
        """Kill the child and reap it."""
        self.proc.kill()
        self.proc.wait(5)


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


async def run_llmtop(truth: Truth, n: int) -> dict[str, Any]:
    """`n` sequential requests through llmtop's OpenAI-compatible client (after 2 warm-ups)."""
    engine = OpenAIEngine(truth.url)
    try:
        for i in range(2):
            c = RequestCollector(prompt=f"warm-{i}", options={}, model=MODEL)
            await run_request(lambda c=c: engine.stream_chat(MODEL, chat_messages(c.prompt)), c)
        start = time.perf_counter_ns()
        results = []
        for i in range(n):
            c = RequestCollector(prompt=f"llmtop-{i}", options={}, model=MODEL)
            results.append(await run_request(
                lambda c=c: engine.stream_chat(MODEL, chat_messages(c.prompt)), c))
        wall_s = (time.perf_counter_ns() - start) / 1e9
    finally:
        await engine.aclose()
    ok = [r for r in results if r.status == "ok"]
    tokens = sum(r.metrics.output_tokens or 0 for r in ok)
    return {
        "tool": "llmtop", "start_ns": start, "ok": len(ok), "sent": n,
        "ttft": _median([r.metrics.ttft_ms for r in ok if r.metrics.ttft_ms is not None]),
        "itl": _median([r.metrics.tpot_ms for r in ok if r.metrics.tpot_ms is not None]),
        "itl_name": "TPOT (E2E − TTFT)/(n − 1)",
        "req_s": len(ok) / wall_s, "tok_s": tokens / wall_s,
    }


def ensure_peer(venv: Path, peer: str) -> Path:
    """The peer's virtualenv (made and filled with pip when missing); returns its python."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *PEER_PACKAGES[peer]],
                   check=True)
    return python


def make_tokenizer(python: Path, folder: str) -> str:  # a few minutes on 2 loaded cores
    """A Hugging Face tokenizer folder (under `folder`: the peer's virtualenv, reused) made
    from llmtop's bundled GGUF (transformers reads a GGUF's vocabulary with the `gguf`
    package), by the peer's python."""
    from llmtop.servers.embedded.model_files import bundled_model_path

    gguf = Path(bundled_model_path())
    out = os.path.join(folder, "llmtop-tokenizer")
    if os.path.exists(os.path.join(out, "tokenizer_config.json")):
        return out  # made by an earlier run into the same virtualenv
    script = ("import sys; from transformers import AutoTokenizer; "
              "t = AutoTokenizer.from_pretrained(sys.argv[1], gguf_file=sys.argv[2]); "
              "t.save_pretrained(sys.argv[3])")
    subprocess.run([str(python), "-c", script, str(gguf.parent), gguf.name, out], check=True)
    return out


def run_guidellm(python: Path, truth: Truth, n: int, tokenizer: str, folder: str,
                 prompt_tokens: int, chunks: int) -> dict[str, Any]:
    """GuideLLM 0.8 (`guidellm run`), synchronous profile, `n` requests over
    /v1/chat/completions; its own aggregate medians from its JSON output."""
    out = Path(folder) / "guidellm.json"
    start = time.perf_counter_ns()
    cmd = [str(python.parent / "guidellm"), "run",
           "--backend", (f"kind=openai_http,target={truth.url},model={MODEL},"
           "request_format=/v1/chat/completions"),
           "--profile", "kind=synchronous",
           "--constraint", f"kind=max_requests,count={n}",
           "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
           "--data", f"kind=synthetic_text,prompt_tokens={prompt_tokens},output_tokens={chunks}",
           "--output", f"kind=json,path={out}", "--disable-console-interactive"]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"guidellm failed ({proc.returncode}): {proc.stderr[-3000:]}")
    bench = json.loads(out.read_text())["benchmarks"][0]
    metrics = bench["metrics"]

    def med(name: str) -> float | None:
        block = metrics.get(name) or {}
        block = block.get("successful", block)
        value = block.get("median")
        return float(value) if value is not None else None

    return {
        "tool": "guidellm", "start_ns": start, "ok": None, "sent": n,
        "ttft": med("time_to_first_token_ms"), "itl": med("inter_token_latency_ms"),
        "tpot": med("time_per_output_token_ms"),
        "itl_name": "ITL (last − first token)/(n − 1); its TPOT (last token − send)/n "
                    "in the JSON",
        "req_s": med("requests_per_second"), "tok_s": med("output_tokens_per_second"),
        "raw_metrics": sorted(metrics),
    }


def table(rows: list[dict[str, Any]], truths: list[list[dict[str, float]]]) -> str:
    """The side-by-side table: each tool's figures and errors against its own truth."""
    lines = [("| tool | n | TTFT p50 ms | truth TTFT | error | per-token p50 ms | truth | error "
             "| its definition | req/s | tok/s |"), "|" + "---|" * 11]
    for row, truth in zip(rows, truths, strict=True):
        t_ttft = _median([t["ttft"] for t in truth])
        t_tok = _median([t["per_token"] for t in truth])

        def err(x: float | None, t: float | None) -> str:
            return "n/a" if x is None or t is None else f"{x - t:+.2f}"

        def f(x: float | None) -> str:
            return "n/a" if x is None else f"{x:.2f}"

        lines.append(f"| {row['tool']} | {len(truth)} | {f(row['ttft'])} | {f(t_ttft)} | "
                     f"{err(row['ttft'], t_ttft)} | {f(row['itl'])} | {f(t_tok)} | "
                     f"{err(row['itl'], t_tok)} | {row['itl_name']} | {f(row['req_s'])} | "
                     f"{f(row['tok_s'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run llmtop and the peer against one truth server; print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", choices=sorted(PEER_PACKAGES), default="guidellm")
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--first-ms", type=float, default=100.0)
    ap.add_argument("--chunks", type=int, default=50)
    ap.add_argument("--gap-ms", type=float, default=10.0)
    ap.add_argument("--prompt-tokens", type=int, default=100)
    ap.add_argument("--venv", type=Path, default=Path("/tmp/llmtop-peers-venv"))
    ap.add_argument("--json", help="write the rows as JSON here")
    args = ap.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f} / {os.getloadavg()[1]:.2f} (1 / 5 min), "
          f"{os.cpu_count()} CPUs", file=sys.stderr)
    python = ensure_peer(args.venv, args.peer)
    with tempfile.TemporaryDirectory(prefix="llmtop-peers-") as folder:
        tokenizer = make_tokenizer(python, str(args.venv))
        truth = Truth(folder, args.first_ms, args.chunks, args.gap_ms)
        try:
            rows = [asyncio.run(run_llmtop(truth, args.requests))]
            rows.append(run_guidellm(python, truth, args.requests, tokenizer, folder,
                                     args.prompt_tokens, args.chunks))
            starts = [r["start_ns"] for r in rows] + [time.perf_counter_ns()]
            everything = truth.since(0)
            log = [json.loads(line) for line in truth.log.read_text().splitlines()]
            truths = [[t for t, r in zip(everything, log, strict=True)
                       if starts[k] <= r["recv_ns"] < starts[k + 1]] for k in range(len(rows))]
        finally:
            truth.stop()
    print(table(rows, truths))
    print(f"\nload average after: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
