"""How far llmtop's TTFT is from the truth on the wire, per client path.

    python bench/clock_truth.py [--requests 20] [--runs 8] [--paths ollama,run] [--json FILE]

A scripted server (bench/truth_server.py, a child process) logs, on the same clock as
llmtop's `perf_counter_ns`, when each request had arrived and when its first text chunk was
handed to the socket. The true TTFT of a request is the difference; llmtop's error is its own
TTFT minus that. Paths, each warm (a few discarded requests first) unless said:
  ollama      `OllamaEngine` + `run_request`, in this process (what the TUI does)
  relay       `RelayEngine` → `llmtop relay` (child) → server: the relay's cost included
  run         `llmtop run --json` in a fresh process per request (its TTFT from its log)
  openai      the OpenAI-compatible client, when this tree has one (engines/openai.py)
Also printed: the client's preparation time (`client_prep_ms`: asking → body on the socket,
outside TTFT) and what the error would be with the stamp taken before the request is built
(the definition before the socket stamp). Targets (the "monitor cost" issue): in-process
≤ 0.3 ms median and ≤ 1 ms max; `llmtop run` ≤ 0.5 ms median.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmtop.engines.ollama import OllamaEngine
from llmtop.engines.relay import RelayEngine
from llmtop.servers.child import free_port
from llmtop.servers.relay.process import RelayProcess
from llmtop.sessions.measure.request import (
    RequestCollector,
    RequestResult,
    chat_messages,
    run_request,
)
from llmtop.sessions.records.log import read_log

HERE = Path(__file__).resolve().parent
MODEL = "truth:latest"
WARMUP = 3


class Truth:
    """The truth server as a child process (`script`: its options, e.g. "--chunks", "300");
    `ttft_ns(prompt)` reads its log for one request."""

    def __init__(self, folder: str, *script: str) -> None:
        self.log = Path(folder) / "truth.jsonl"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "truth_server.py"), str(self.port), str(self.log),
             *script],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def ttft_ns(self, prompt: str) -> int:
        """first_ns − recv_ns of the request whose prompt was `prompt`. Raises KeyError."""
        for line in self.log.read_text().splitlines():
            rec = json.loads(line)
            if rec["prompt"] == prompt:
                return int(rec["first_ns"]) - int(rec["recv_ns"])
        raise KeyError(prompt)

    def stop(self) -> None:
        """Kill the child and reap it."""
        self.proc.kill()
        self.proc.wait(5)


def _first_text_ns(result: RequestResult) -> int:
    return next(e.t_ns for e in result.events if e.has_text)


async def in_process(engine: Any, truth: Truth, tag: str, n: int) -> dict[str, list[float]]:
    """`n` measured requests (after WARMUP) through `engine`: error, legacy error, prep (ms)."""
    out: dict[str, list[float]] = {"error": [], "legacy": [], "prep": []}
    for i in range(WARMUP + n):
        prompt = f"{tag}-{i}"
        collector = RequestCollector(prompt=prompt, options={}, model=MODEL)
        result = await run_request(
            lambda p=prompt: engine.stream_chat(MODEL, chat_messages(p)), collector
        )
        if i < WARMUP:
            continue
        true_ns = truth.ttft_ns(prompt)
        first = _first_text_ns(result)
        prep = result.prep_ns or 0
        out["error"].append((first - result.sent_ns - true_ns) / 1e6)
        out["legacy"].append((first - (result.sent_ns - prep) - true_ns) / 1e6)
        out["prep"].append(prep / 1e6)
    await engine.aclose()
    return out


def fresh_runs(truth: Truth, n: int, folder: str) -> dict[str, list[float]]:
    """`llmtop run` in a new process per request; its TTFT from its session log."""
    out: dict[str, list[float]] = {"error": [], "prep": []}
    for i in range(n):
        prompt, log = f"run-{i}", os.path.join(folder, f"run-{i}.jsonl")
        subprocess.run(
            [sys.executable, "-m", "llmtop", "run", "--engine", "ollama", "--host", truth.url,
             "--model", MODEL, "--prompt", prompt, "--json", "--log", log],
            check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        )
        record = read_log(log).requests[0]
        ttft = record.metric("ttft_ms")
        assert ttft is not None, "llmtop run logged no TTFT"
        out["error"].append(ttft - truth.ttft_ns(prompt) / 1e6)
        out["prep"].append(record.client_prep_ms or 0.0)
    return out


def summary(values: list[float]) -> dict[str, float]:
    """median / min / max of `values` (ms)."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


async def measure(args: argparse.Namespace, folder: str) -> dict[str, dict[str, list[float]]]:
    """Every path's errors, each against the same truth server."""
    truth = Truth(folder)
    paths: dict[str, dict[str, list[float]]] = {}
    wanted = set(args.paths.split(","))
    try:
        if "ollama" in wanted:
            paths["ollama"] = await in_process(OllamaEngine(truth.url), truth, "ollama",
                                               args.requests)
        openai = _openai_engine()
        if openai is not None and "openai" in wanted:
            paths["openai"] = await in_process(openai(truth.url), truth, "openai", args.requests)
        if "relay" in wanted:
            async with RelayProcess(truth.url) as relay:
                paths["relay"] = await in_process(RelayEngine(relay.url), truth, "relay",
                                                  args.requests)
        if "run" in wanted:
            paths["run"] = fresh_runs(truth, args.runs, folder)
    finally:
        truth.stop()
    return paths


def _openai_engine() -> Callable[[str], Any] | None:
    """The OpenAI-compatible engine's class when this tree has one (truth_server.py speaks
    /v1/chat/completions too), else None."""
    if importlib.util.find_spec("llmtop.engines.openai") is None:
        return None
    from llmtop.engines.openai import OpenAIEngine

    return OpenAIEngine


TARGETS = {"ollama": (0.3, 1.0), "openai": (0.3, 1.0), "relay": (None, None), "run": (0.5, None)}


def rows(paths: dict[str, dict[str, list[float]]]) -> list[dict[str, Any]]:
    """The result rows for bench/run_all.py: metric, measured, target, met."""
    out = []
    for name, series in paths.items():
        s = summary(series["error"])
        med_target, max_target = TARGETS[name]
        if med_target is not None:
            out.append({"metric": f"TTFT error, {name}, median", "measured": s["median"],
                        "unit": "ms", "target": med_target, "met": s["median"] <= med_target})
        if max_target is not None:
            out.append({"metric": f"TTFT error, {name}, max", "measured": s["max"], "unit": "ms",
                        "target": max_target, "met": s["max"] <= max_target})
    return out


def main(argv: list[str] | None = None) -> int:
    """Run every path; print a table; write the rows as JSON with --json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20, help="measured requests per path")
    ap.add_argument("--runs", type=int, default=8, help="fresh `llmtop run` processes")
    ap.add_argument("--paths", default="ollama,openai,relay,run",
                    help="the paths to measure, comma-separated (default: all)")
    ap.add_argument("--json", help="write the result rows here")
    args = ap.parse_args(argv)
    print("load average at start: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    with tempfile.TemporaryDirectory(prefix="llmtop-truth-") as folder:
        paths = asyncio.run(measure(args, folder))
    print(f"{'path':8} {'n':>3} {'error p50':>10} {'min':>7} {'max':>7}  {'prep p50':>9}"
          f"  {'error w/o socket stamp':>22}")
    for name, series in paths.items():
        s = summary(series["error"])
        legacy = f"{statistics.median(series['legacy']):+.2f}" if "legacy" in series else "-"
        print(f"{name:8} {len(series['error']):>3} {s['median']:>+9.2f}m {s['min']:>+7.2f}"
              f" {s['max']:>+7.2f}  {statistics.median(series['prep']):>8.2f}m  {legacy:>22}")
    print("load average at end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    result = rows(paths)
    if args.json:
        Path(args.json).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
