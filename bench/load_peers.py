"""`llmtop load` beside GuideLLM and Locust (FastHttpUser), open loop, in one run.

    python bench/load_peers.py [--rates 10,25,50,100,200] [--seconds 2] [--min-requests 40]
                               [--tools llmtop,locust,guidellm] [--venv /tmp/llmtop-peers-venv]
                               [--json FILE] [--raw FILE]

One zero-latency truth server (bench/truth_server.py: 20 chunks per answer, no wait before
any of them; it stamps its own reads and writes on the shared monotonic clock). Each tool
then sends, per rate of the ladder, max(--min-requests, rate × --seconds) requests on a
constant timetable (open loop) over /v1/chat/completions, and per (tool, rate) the table
gives:

- send lag p50 / p99 (ms): actual send − scheduled send, each tool by its own stamps:
  llmtop's `lag_ms` per request in its session log; GuideLLM's `request_start −
  targeted_start` per request in its JSON (its own scheduler's timings); Locust reports no
  schedule, so bench/locust_open.py keeps one (a shared timetable) and stamps the send;
- held: lag p99 ≤ `HELD_LAG_P99_MS` and every request completed (the issue's rule, #31);
- CPU ms per request: the tool's whole process tree (user + system, children included),
  sampled every `POLL_S` by psutil and read across the window from the first measured
  request's arrival at the server to the last one's done chunk (interpolated), ÷ requests;
  so start-up, imports and llmtop's calibration are not counted, the tool's helper threads
  and worker processes are;
- TTFT error median / p90 / max (ms): the tool's TTFT − the server's (first chunk's write −
  request's read), request by request (matched by prompt).

The peer venv (--venv) is bench/peers.py's: GuideLLM and a tokenizer made from llmtop's
GGUF; this script installs it there when missing (pip: network), never into the project.
Locust comes from the project's own environment, so `--tools llmtop,locust` needs neither
network nor the peer venv: that is `make bench`'s "load-peers" entry (bench/run_all.py), its
rows (`--json`) llmtop's highest held rate against Locust's, its CPU per request and its TTFT
error at the common rate. GuideLLM stays out of `make bench` (peer venv).
Every figure comes with the load average, since the machine's other work moves it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from llmtop.sessions.runners.load.config import parse_levels

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from peers import MODEL, Truth, ensure_peer, make_tokenizer

HELD_LAG_P99_MS = 1.0  # issue #31 item 5: send lag p99 ≤ 1 ms
POLL_S = 0.02


class TreeCPU:
    """Samples a process tree's CPU seconds (user + system, reaped children included) with
    (perf_counter_ns, time.time) stamps, in a thread, until `stop()`."""

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self.samples: list[tuple[int, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _cpu(self) -> float | None:
        total = 0.0
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return None
        for p in procs:
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system + t.children_user + t.children_system
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            cpu = self._cpu()
            if cpu is not None:
                self.samples.append((time.perf_counter_ns(), time.time(), cpu))
            self._stop.wait(POLL_S)

    def stop(self) -> None:
        """End the sampling."""
        self._stop.set()
        self._thread.join(5)

    def between(self, a: float, b: float, wall: bool = False) -> float:
        """CPU seconds spent between two moments (perf_counter_ns, or time.time when
        `wall`), linearly interpolated between the samples either side."""
        k = 1 if wall else 0
        xs = [s[k] for s in self.samples]
        ys = [s[2] for s in self.samples]

        def at(t: float) -> float:
            if t <= xs[0]:
                return ys[0]
            for i in range(1, len(xs)):
                if t <= xs[i]:
                    f = (t - xs[i - 1]) / max(xs[i] - xs[i - 1], 1e-9)
                    return ys[i - 1] + f * (ys[i] - ys[i - 1])
            return ys[-1]

        return at(b) - at(a)


def truth_log(truth: Truth) -> list[dict[str, Any]]:
    """Every request the truth server logged, in order."""
    return [json.loads(line) for line in truth.log.read_text().splitlines()]


def pct(xs: list[float], q: float) -> float | None:
    """The q-quantile (0..1, nearest rank) of xs; None when empty."""
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * len(s) + 0.5) - 1))]


def row(tool: str, rate: float, n: int, lags: list[float], ttfts: dict[str, float],
        truth: dict[str, dict[str, Any]], cpu_s: float | None, own_cpu_ms: float | None,
        load: float) -> dict[str, Any]:
    """One table row: lags (ms), TTFT per prompt (ms) against the truth per prompt."""
    errors = [ttfts[p] - (t["first_ns"] - t["recv_ns"]) / 1e6
              for p, t in truth.items() if ttfts.get(p) is not None]
    p99 = pct(lags, 0.99)
    return {"tool": tool, "rate": rate, "sent": n, "ok": len(errors), "load": load,
            "lag_p50": pct(lags, 0.5), "lag_p99": p99,
            "held": p99 is not None and p99 <= HELD_LAG_P99_MS and len(errors) == n,
            "cpu_ms": None if cpu_s is None else cpu_s * 1000 / n, "own_cpu_ms": own_cpu_ms,
            "err_p50": pct(errors, 0.5), "err_p90": pct(errors, 0.9),
            "err_max": max(errors) if errors else None}


def _window(records: list[dict[str, Any]]) -> tuple[int, int]:
    return min(r["recv_ns"] for r in records), max(r["done_ns"] for r in records)


def run_llmtop(truth: Truth, rate: float, n: int, folder: str) -> dict[str, Any]:
    """`llmtop load` (a child process: this checkout's) at one rate, constant arrivals."""
    log = Path(folder) / f"llmtop-{rate:g}.jsonl"
    before = len(truth_log(truth))
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    cmd = [sys.executable, "-m", "llmtop", "load", "--engine", "openai",
           "--host", f"{truth.url}/v1", "--model", MODEL, "--rate", f"{rate:g}",
           "--arrivals", "constant", "--requests", str(n), "--prompt-tokens", "30",
           "--max-tokens", "20", "--no-cache", "--preflight-duration", "0", "--no-early-stop",
           "--log", str(log), "--json"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    cpu = TreeCPU(proc.pid)
    _, err = proc.communicate()
    cpu.stop()
    # 1: the sweep ran and its verdict is NOISY or CONTAMINATED (what else ran is in the row)
    if proc.returncode not in (0, 1) or not log.exists():
        raise RuntimeError(f"llmtop load failed ({proc.returncode}): {err[-2000:]}")
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    verdict = next((v for v in (_verdict(line) for line in err.splitlines()) if v), "")
    measured = [r for r in lines if r.get("type") == "request" and r.get("phase") == "measure"]
    end = next(r for r in lines if r.get("type") == "level" and r.get("phase") == "end")
    own = end["generator_cpu_ns"] / 1e6 / n  # the event-loop thread alone, as llmtop reports
    records = truth_log(truth)[before:][-n:]
    a, b = _window(records)
    out = row("llmtop", rate, n, [r["lag_ms"] for r in measured],
              {r["prompt"]: r["metrics"]["ttft_ms"] for r in measured if r["status"] == "ok"},
              {r["prompt"]: r for r in records}, cpu.between(a, b), own,
              os.getloadavg()[0])
    out["verdict"] = verdict
    return out


def _verdict(line: str) -> str | None:
    """llmtop load's verdict line on stderr ("CONTAMINATED — 25 req/s: NOISY: app-busy"), or
    None for any other line."""
    text = line.removeprefix("llmtop load: ")
    return text if text.startswith(("CONTAMINATED", "INCONCLUSIVE", "NOISY")) else None


def run_locust(truth: Truth, rate: float, n: int, folder: str) -> dict[str, Any]:
    """Locust's FastHttpUser on bench/locust_open.py's timetable at one rate."""
    out = Path(folder) / f"locust-{rate:g}.jsonl"
    before = len(truth_log(truth))
    users = str(max(4, min(64, int(rate // 10) + 4)))
    env = {**os.environ, "LP_RATE": f"{rate:g}", "LP_COUNT": str(n), "LP_OUT": str(out)}
    cmd = [str(Path(sys.executable).parent / "locust"), "-f", str(HERE / "locust_open.py"),
           "--headless", "-u", users, "-r", "1000", "--host", truth.url, "--only-summary",
           "--run-time", f"{int(n / rate) + 30}s"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    cpu = TreeCPU(proc.pid)
    _, err = proc.communicate()
    cpu.stop()
    if not out.exists():
        raise RuntimeError(f"locust wrote no results ({proc.returncode}): {err[-2000:]}")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    records = truth_log(truth)[before:]
    a, b = _window(records)
    return row("locust", rate, n, [r["lag_ms"] for r in rows],
               {r["prompt"]: r["ttft_ms"] for r in rows}, {r["prompt"]: r for r in records},
               cpu.between(a, b), None, os.getloadavg()[0])


def run_guidellm(truth: Truth, python: Path, rates: tuple[float, ...], seconds: float,
                 tokenizer: str, folder: str) -> list[dict[str, Any]]:
    """GuideLLM 0.8 (`guidellm run`), one invocation, a constant profile per rate, each for
    `seconds`; per benchmark its own per-request timings from its JSON output."""
    out = Path(folder) / "guidellm.json"
    before = len(truth_log(truth))
    cmd = [str(python.parent / "guidellm"), "run",
           "--backend", (f"kind=openai_http,target={truth.url},model={MODEL},"
                         "request_format=/v1/chat/completions"),
           "--profile", f"kind=constant,rate={rates[0]:g}",
           "--override", "profile.rate", ",".join(f"{r:g}" for r in rates),
           "--constraint", f"kind=max_duration,seconds={seconds:g}",
           "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
           "--data", "kind=synthetic_text,prompt_tokens=30,output_tokens=20",
           "--output", f"kind=json,path={out}", "--disable-console-interactive"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    cpu = TreeCPU(proc.pid)
    _, err = proc.communicate()
    cpu.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"guidellm failed ({proc.returncode}): {err[-2000:]}")
    truth_by_prompt = {r["prompt"]: r for r in truth_log(truth)[before:]}
    rows = []
    for bench in json.loads(out.read_text())["benchmarks"]:
        rate = float(bench["config"]["strategy"]["rate"])
        done = bench["requests"]["successful"]
        sent = len(done) + len(bench["requests"]["errored"]) + len(bench["requests"]["incomplete"])
        lags, ttfts, truth = [], {}, {}
        for r in done:
            t = r["info"]["timings"]
            lags.append((t["request_start"] - t["targeted_start"]) * 1000)
            body = json.loads(r["request_args"])["body"]
            prompt = str(body["messages"][-1]["content"])
            ttfts[prompt] = r["time_to_first_token_ms"]
            if prompt in truth_by_prompt:
                truth[prompt] = truth_by_prompt[prompt]
        cpu_s = cpu.between(bench["start_time"], bench["end_time"], wall=True)
        rows.append(row("guidellm", rate, sent, lags, ttfts, truth, cpu_s, None,
                        os.getloadavg()[0]))
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """The per (tool, rate) table."""
    def f(x: float | None, fmt: str = ".2f") -> str:
        return "n/a" if x is None else format(x, fmt)

    out = [("| tool | rate req/s | sent / ok | send lag p50 / p99 ms | held | CPU ms/req "
           "(tree; loop thread) | TTFT error p50 / p90 / max ms | load avg | llmtop's verdict |"),
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        own = f"; {f(r['own_cpu_ms'])}" if r["own_cpu_ms"] is not None else ""
        out.append(f"| {r['tool']} | {r['rate']:g} | {r['sent']} / {r['ok']} | "
                   f"{f(r['lag_p50'])} / {f(r['lag_p99'])} | {'yes' if r['held'] else 'no'} | "
                   f"{f(r['cpu_ms'])}{own} | {f(r['err_p50'])} / {f(r['err_p90'])} / "
                   f"{f(r['err_max'])} | {r['load']:.2f} | {r.get('verdict') or '—'} |")
    return "\n".join(out)


def summary(rows: list[dict[str, Any]]) -> str:
    """Per tool: the highest held rate, with its CPU and TTFT error there."""
    out = [("| tool | highest rate held (lag p99 ≤ 1 ms) | CPU ms/req there | TTFT error p50 / "
           "max ms there |"), "|---|---|---|---|"]
    for tool in dict.fromkeys(r["tool"] for r in rows):
        held = [r for r in rows if r["tool"] == tool and r["held"]]
        if not held:
            out.append(f"| {tool} | none of the ladder | n/a | n/a |")
            continue
        best = max(held, key=lambda r: r["rate"])
        out.append(f"| {tool} | {best['rate']:g} | {best['cpu_ms']:.2f} | "
                   f"{best['err_p50']:.2f} / {best['err_max']:.2f} |")
    return "\n".join(out)


def common_rate(rows: list[dict[str, Any]]) -> float:
    """The rate the TTFT errors are compared at: the highest every tool held, else the
    ladder's lowest (every tool ran it)."""
    tools = {r["tool"] for r in rows}
    rates = sorted({r["rate"] for r in rows})
    held = [q for q in rates
            if all(any(r["tool"] == t and r["rate"] == q and r["held"] for r in rows)
                   for t in tools)]
    return held[-1] if held else rates[0]


def bench_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`make bench` rows (bench/run_all.py's shape) for llmtop beside Locust: its highest held
    rate (target: Locust's in the same run, "not behind on rate"), its CPU per request, and
    its TTFT error at the common rate (target: ≤ Locust's there, "ahead on error")."""
    def best(tool: str) -> float:
        return max((r["rate"] for r in rows if r["tool"] == tool and r["held"]), default=0.0)

    q = common_rate(rows)
    at = {r["tool"]: r for r in rows if r["rate"] == q}
    me, peer = at.get("llmtop"), at.get("locust")
    out: list[dict[str, Any]] = []
    if me is None or peer is None:
        return out
    out.append({"metric": "load: highest open-loop rate, send lag p99 ≤ 1 ms (Locust "
                          f"FastHttpUser: {best('locust'):g})", "measured": best("llmtop"),
                "unit": "req/s", "target": best("locust"), "target_op": ">=",
                "met": None if best("locust") == best("llmtop") == 0  # neither held any
                else best("llmtop") >= best("locust")})
    out.append({"metric": f"load: send lag p99 at {q:g} req/s (Locust: {peer['lag_p99']:.2f})",
                "measured": me["lag_p99"], "unit": "ms", "target": peer["lag_p99"],
                "target_op": "<=", "met": me["lag_p99"] <= peer["lag_p99"]})
    out.append({"metric": f"load: CPU per request at {q:g} req/s, process tree (Locust: "
                          f"{peer['cpu_ms']:.2f})", "measured": me["cpu_ms"], "unit": "ms",
                "target": None, "met": None})
    if me["err_p50"] is not None and peer["err_p50"] is not None:
        out.append({"metric": f"load: TTFT error p50 at {q:g} req/s (Locust: "
                              f"{peer['err_p50']:.2f})", "measured": me["err_p50"],
                    "unit": "ms", "target": peer["err_p50"], "target_op": "<=",
                    "met": me["err_p50"] <= peer["err_p50"]})
    return out


def main(argv: list[str] | None = None) -> int:
    """The ladder for each tool against one truth server; print both tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", type=lambda t: parse_levels(t, False),
                    default=(10, 25, 50, 100, 200))
    ap.add_argument("--seconds", type=float, default=2.0, help="seconds of requests per rate")
    ap.add_argument("--min-requests", type=int, default=40)
    ap.add_argument("--tools", default="llmtop,locust,guidellm")
    ap.add_argument("--venv", type=Path, default=Path("/tmp/llmtop-peers-venv"))
    ap.add_argument("--json", help="write `make bench` rows (bench/run_all.py) here")
    ap.add_argument("--raw", help="write every (tool, rate) row as JSON here")
    args = ap.parse_args(argv)
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    unknown = set(tools) - {"llmtop", "locust", "guidellm"}
    if unknown:
        ap.error(f"--tools: unknown {', '.join(sorted(unknown))} (llmtop, locust, guidellm)")
    load0 = os.getloadavg()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="llmtop-load-peers-") as folder:
        python = tokenizer = None
        if "guidellm" in tools:
            python = ensure_peer(args.venv, "guidellm")
            tokenizer = make_tokenizer(python, str(args.venv))
        truth = Truth(folder, 0.0, 20, 0.0)
        try:
            for rate in args.rates:  # interleaved by rate: the machine's load moves
                n = max(args.min_requests, round(rate * args.seconds))
                if "llmtop" in tools:
                    rows.append(run_llmtop(truth, rate, n, folder))
                if "locust" in tools:
                    rows.append(run_locust(truth, rate, n, folder))
            if python is not None and tokenizer is not None:
                rows.extend(run_guidellm(truth, python, args.rates, args.seconds, tokenizer,
                                         folder))
        finally:
            truth.stop()
    load1 = os.getloadavg()
    print(f"# open loop against a zero-latency truth server (20 chunks per answer), "
          f"{os.cpu_count()} CPUs; load average {load0[0]:.2f} → {load1[0]:.2f} (1 min)\n")
    print(table(rows))
    print()
    print(summary(rows))
    print(f"\nTTFT errors compared at {common_rate(rows):g} req/s (the highest rate every "
          "tool held, else the ladder's lowest)")
    if args.raw:
        Path(args.raw).write_text(json.dumps(rows, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(bench_rows(rows), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
