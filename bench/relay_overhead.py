"""What llmtop's SSE relay adds to TTFT and decode: direct vs relayed, paired, in one run.

    python bench/relay_overhead.py [--rounds 40] [--engine-rounds 30] [--no-engine]
                                   [--engine-url URL] [--model NAME] [--num-predict 16]

Two upstreams, each measured with the relay (a child process, `llmtop.servers.relay`) in front and
without it:
  (a) a scripted Ollama-API upstream with known timings: first chunk after 50 ms, then 20
      chunks 10 ms apart (a child process, `python -m llmtop.testing.scripted`);
  (b) the real embedded engine (started as a child process unless --engine-url is given),
      with a fresh random-word prompt for every request (no prefix-cache hits).
Four paths per round, their order rotated every round so no path always goes first:
  direct  / engine  `OllamaEngine` → upstream              (what the TUI measures directly)
  relayed / engine  `RelayEngine`  → relay → upstream      (what the TUI measures relayed)
  direct  / raw     bare httpx NDJSON reader → upstream    (no client library cost)
  relayed / raw     bare httpx SSE reader → relay → upstream
TTFT = send → first text chunk, stamped once its line parses (docs/method.md, "TTFT and E2E"). The
relay's cost is the median of the paired per-round differences (relayed − direct), with its
IQR. Decode = client-observed chunk rate (text chunks − 1) / (last − first text chunk).
Warm-up rounds are run first and discarded. Targets, for (a), as ratios to the bare TCP
forwarder below measured in the same run: the relay's CPU per request ≤ 1.5 × the
forwarder's, and its added TTFT ≤ the forwarder's + 0.5 ms. Each setup also prints a verdict
on "relay adds ≤ 1 ms median TTFT", "inconclusive" when the paired differences are too spread
to tell. The relay's own
CPU time per relayed request is printed too (on a machine with few cores it competes with the
engine, which shows as a lower decode rate), and, for (a), the CPU per request of its floor:
bench/sse_floor.py, a bare ASGI app that sends the same 21 frames under the same server
without an upstream (what any Python server pays for those wakeups and writes here), and
bench/proxy_floor.py, a bare TCP forwarder in front of the upstream (one wake-up, read and
write per frame, no HTTP: what any relay pays), and the same forwarder with `--task`, each
frame handed to a task that writes it (what waking a task per chunk adds, as every relay
built on async iterators does). Then the same 21 frames are sent with no gap
between them, through the relay and through the forwarder: with no idle time between frames
nothing wakes per frame, so what is left is the code's own work. On a VM whose wake-ups are
dear (a bare uvloop loop here costs 5 µs per iteration back to back and ~210 µs when each one
follows 10 ms of sleep), these rows tell the machine's share from the relay's.
Exit status 1 when the target was clearly missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter_ns

import httpx
from cputime import CpuMeter

from llmtop.engines.ollama import OllamaEngine
from llmtop.engines.relay import RelayEngine
from llmtop.servers.child import EmbeddedProcess, free_port
from llmtop.servers.relay.process import RelayProcess
from llmtop.sessions.measure.prompts import PromptGenerator
from llmtop.sessions.measure.request import RequestCollector, chat_messages, run_request

HERE = Path(__file__).resolve().parent
TARGET_MS = 1.0  # the verdict printed for each setup (the engine's own paths)
# The rows' targets are ratios to the bare TCP forwarder measured in the same run, since this
# machine's price per wake-up moves the absolute figures by 2x with its load:
TARGET_CPU_RATIO = 1.5  # relay CPU per request ≤ 1.5 × the forwarder's
TARGET_HOP_EXTRA_MS = 0.5  # relay's added TTFT ≤ the forwarder's + 0.5 ms
ROWS: list[dict] = []  # result rows for bench/run_all.py (--json), scripted upstream only
PATHS = ("direct/engine", "relayed/engine", "direct/raw", "relayed/raw")


@dataclass
class Sample:
    """One request: TTFT in ms and client-observed decode in chunks/s (None if < 2 chunks)."""

    ttft_ms: float
    decode_cps: float | None
    server_decode_tps: float | None = None


@dataclass
class Series:
    samples: dict[str, list[Sample]] = field(default_factory=lambda: {p: [] for p in PATHS})
    relay_cpu_ms: float | None = None  # the relay process's CPU time (user+sys), measured rounds
    floor_cpu_ms: float | None = None  # bench/sse_floor.py's CPU time per request
    proxy_cpu_ms: float | None = None  # bench/proxy_floor.py's CPU time per request
    task_proxy_cpu_ms: float | None = None  # the forwarder waking a task per frame
    busy_cpu_ms: tuple[float, float] | None = None  # (relay, proxy) with no gap between frames
    hop_ttft_ms: float | None = None  # TTFT added by a bare TCP forwarder (paired median)


def _decode(stamps: list[int]) -> float | None:
    if len(stamps) < 2 or stamps[-1] == stamps[0]:
        return None
    return (len(stamps) - 1) / ((stamps[-1] - stamps[0]) / 1e9)


async def _via_engine(
    engine: OllamaEngine | RelayEngine, model: str, prompt: str, options: dict
) -> Sample:
    collector = RequestCollector(prompt=prompt, options=options, model=model)
    r = await run_request(
        lambda: engine.stream_chat(model, chat_messages(prompt), options=options), collector
    )
    if r.metrics.ttft_ms is None or r.failure is not None:
        raise RuntimeError(f"{engine.name}: request failed: {r.failure}")
    stamps = [e.t_ns for e in r.events if e.has_text]
    return Sample(r.metrics.ttft_ms, _decode(stamps), r.metrics.server_decode_tps)


async def _raw_direct(client: httpx.AsyncClient, model: str, prompt: str, options: dict) -> Sample:
    body = {"model": model, "messages": chat_messages(prompt), "stream": True, "options": options}
    stamps: list[int] = []
    sent = perf_counter_ns()
    async with client.stream("POST", "/api/chat", json=body) as resp:
        async for line in resp.aiter_lines():
            if not line:
                continue
            obj = json.loads(line)
            t = perf_counter_ns()
            msg = obj.get("message") or {}
            if msg.get("content") or msg.get("thinking"):
                stamps.append(t)
            if obj.get("done") or "error" in obj:
                break
    if not stamps:
        raise RuntimeError("raw direct: no text")
    return Sample((stamps[0] - sent) / 1e6, _decode(stamps))


async def _raw_relayed(client: httpx.AsyncClient, model: str, prompt: str, options: dict) -> Sample:
    body = {"model": model, "messages": chat_messages(prompt), "options": options}
    stamps: list[int] = []
    event = ""
    sent = perf_counter_ns()
    async with client.stream("POST", "/api/stream", json=body) as resp:
        async for line in resp.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                obj = json.loads(line[6:])
                t = perf_counter_ns()
                if obj.get("content") or obj.get("thinking"):
                    stamps.append(t)
                if event != "token":
                    break
    if not stamps:
        raise RuntimeError("raw relayed: no text")
    return Sample((stamps[0] - sent) / 1e6, _decode(stamps))


async def measure(upstream: str, relay: RelayProcess, model: str, rounds: int, warmup: int,
                  options: dict, prompts: Callable[[], str] | None) -> Series:
    """Run warm-up + `rounds` rounds of the four paths, order rotated per round."""
    relay_url = relay.url
    assert relay.pid is not None  # started by `async with`
    meter = CpuMeter(relay.pid)
    direct, relayed = OllamaEngine(upstream, name="direct"), RelayEngine(relay_url, name="relayed")
    raw_up = httpx.AsyncClient(base_url=upstream, timeout=300, trust_env=False)
    raw_relay = httpx.AsyncClient(base_url=relay_url, timeout=300, trust_env=False)
    calls: dict[str, Callable[[str], Awaitable[Sample]]] = {
        "direct/engine": lambda p: _via_engine(direct, model, p, options),
        "relayed/engine": lambda p: _via_engine(relayed, model, p, options),
        "direct/raw": lambda p: _raw_direct(raw_up, model, p, options),
        "relayed/raw": lambda p: _raw_relayed(raw_relay, model, p, options),
    }
    series = Series()
    try:
        for r in range(warmup + rounds):
            if r == warmup:
                meter.start()
            order = PATHS[r % 4:] + PATHS[: r % 4]
            for path in order:
                sample = await calls[path](prompts() if prompts else "hi")
                if r >= warmup:
                    series.samples[path].append(sample)
        if rounds:
            series.relay_cpu_ms = meter.stop() / 1e6
            if meter.slices is not None:
                print(f"    relay: {meter.slices / (2 * rounds):.1f} wake-ups per relayed request")
    finally:
        await direct.aclose()
        await relayed.aclose()
        await raw_up.aclose()
        await raw_relay.aclose()
    return series


def _q(values: list[float]) -> tuple[float, float, float]:
    q1, med, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, med, q3


def report(title: str, series: Series) -> bool:
    """Print one setup's table; False when the relay clearly missed the ≤ 1 ms target (engine
    paths)."""
    s = series.samples
    n = len(s[PATHS[0]])
    print(f"\n{title}  (n = {n} rounds after warm-up)")
    print(f"  {'path':<16} {'TTFT p50':>10} {'min':>9} {'max':>9}   {'decode p50 (chunks/s)':>22}")
    for path in PATHS:
        ttft = [x.ttft_ms for x in s[path]]
        dec = [x.decode_cps for x in s[path] if x.decode_cps]
        dec_txt = f"{statistics.median(dec):.1f}" if dec else "–"
        print(
            f"  {path:<16} {statistics.median(ttft):>8.2f}ms {min(ttft):>7.2f}ms "
            f"{max(ttft):>7.2f}ms"
            f"   {dec_txt:>22}"
        )
    verdict = "inconclusive"
    for kind in ("engine", "raw"):
        d = [
            b.ttft_ms - a.ttft_ms
            for a, b in zip(s[f"direct/{kind}"], s[f"relayed/{kind}"], strict=True)
        ]
        q1, med, q3 = _q(d)
        dd = [a.decode_cps for a in s[f"direct/{kind}"] if a.decode_cps]
        rd = [b.decode_cps for b in s[f"relayed/{kind}"] if b.decode_cps]
        ratio = statistics.median(rd) / statistics.median(dd) if dd and rd else float("nan")
        print(
            f"  relayed − direct ({kind:>6}): TTFT median {med:+.3f} ms, IQR [{q1:+.3f}, "
            f"{q3:+.3f}] ms;"
            f" decode relayed/direct {ratio:.3f}"
        )
        if kind == "engine":
            verdict = _verdict(q1, med, q3)
            if title.startswith("(a)"):
                _info("relay's added TTFT (scripted upstream, paired median)", med)
                if series.hop_ttft_ms is not None:
                    extra = med - series.hop_ttft_ms
                    ROWS.append({"metric": "relay's added TTFT − the bare TCP forwarder's "
                                 "(same run)", "measured": extra, "unit": "ms",
                                 "target": TARGET_HOP_EXTRA_MS,
                                 "met": extra <= TARGET_HOP_EXTRA_MS})
    sd = [x.server_decode_tps for x in s["direct/engine"] if x.server_decode_tps]
    sr = [x.server_decode_tps for x in s["relayed/engine"] if x.server_decode_tps]
    if sd and sr:
        print(
            f"  server decode (eval_count/eval_duration) p50: direct {statistics.median(sd):.1f} "
            "tok/s,"
            f" relayed {statistics.median(sr):.1f} tok/s"
        )
    if series.relay_cpu_ms is not None:
        relayed = s["relayed/engine"] + s["relayed/raw"]
        per_request = series.relay_cpu_ms / len(relayed)
        print(f"  relay process CPU: {per_request:.2f} ms per relayed request "
              f"(user+sys, {len(relayed)} requests)")
        if title.startswith("(a)"):
            _info("relay CPU per request (scripted upstream)", per_request)
            if series.proxy_cpu_ms:
                ratio = per_request / series.proxy_cpu_ms
                print(f"  relay CPU / bare TCP forwarder's: {ratio:.2f} ×")
                ROWS.append({"metric": "relay CPU per request / the bare TCP forwarder's "
                             "(same run)", "measured": ratio, "unit": "×",
                             "target": TARGET_CPU_RATIO, "met": ratio <= TARGET_CPU_RATIO})
    if series.floor_cpu_ms is not None:
        print(f"  floor: a bare ASGI app sending the same frames under the same server: "
              f"{series.floor_cpu_ms:.2f} ms CPU per request (bench/sse_floor.py)")
    if series.proxy_cpu_ms is not None:
        print(f"  floor: a bare TCP forwarder (no HTTP) in front of the same upstream: "
              f"{series.proxy_cpu_ms:.2f} ms CPU per request (bench/proxy_floor.py)")
        _info("bare TCP forwarder CPU per request (the wake-ups' floor)", series.proxy_cpu_ms)
    if series.task_proxy_cpu_ms is not None:
        print(f"  the same forwarder waking a task per frame (as any async-iterator relay "
              f"does): {series.task_proxy_cpu_ms:.2f} ms CPU per request")
        _info("the forwarder waking a task per frame (what a task per chunk costs)",
              series.task_proxy_cpu_ms)
    if series.hop_ttft_ms is not None:
        print(f"  a bare TCP forwarder in the path adds {series.hop_ttft_ms:+.3f} ms to TTFT "
              "(paired median): one more process to wake, before any HTTP work")
        _info("TTFT added by a bare TCP forwarder (one more hop's floor, paired median)",
              series.hop_ttft_ms)
    if series.busy_cpu_ms is not None:
        relay_ms, proxy_ms = series.busy_cpu_ms
        print(f"  the same 21 frames with no gap between them (no wake-up per frame): relay "
              f"{relay_ms:.2f} ms, TCP forwarder {proxy_ms:.2f} ms CPU per request")
        _info("relay CPU per request, frames back to back (its own code's work)", relay_ms)
    print(f"  target relay adds ≤ 1 ms median TTFT: {verdict}")
    return verdict != "NOT met"


def _info(metric: str, measured: float) -> None:
    """A row that explains another and has no target of its own."""
    ROWS.append({"metric": metric, "measured": measured, "unit": "ms", "target": None,
                 "met": None})


def _verdict(q1: float, med: float, q3: float) -> str:
    """met / NOT met when the paired differences are tight enough to say, else inconclusive
    (the real engine's prefill jitter on a small machine can swamp a millisecond)."""
    if med <= TARGET_MS and q3 - q1 <= 4.0:
        return "met"
    if med > TARGET_MS and q1 > TARGET_MS:
        return "NOT met"
    return (
        f"inconclusive (IQR {q3 - q1:.1f} ms wide: rerun on a quieter machine or with more rounds)"
    )


def _start_child(script: str, *argv: str) -> tuple[subprocess.Popen[bytes], str]:
    """bench/`script` PORT *argv as a child process, once it accepts connections."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(HERE / script), str(port), *argv],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"bench/{script} did not start")


async def cpu_per_request(pid: int, url: str, sse: bool, requests: int, warmup: int) -> float:
    """CPU ms (user+sys) of process `pid` per request, `requests` of them one after another to
    `url` (read as SSE when `sse`, else as Ollama's NDJSON) after `warmup` discarded ones; its
    wake-ups per request are printed."""
    call = _raw_relayed if sse else _raw_direct
    async with httpx.AsyncClient(base_url=url, timeout=30, trust_env=False) as client:
        for _ in range(warmup):
            await call(client, "timed", "hi", {})
        meter = CpuMeter(pid)
        meter.start()
        for _ in range(requests):
            await call(client, "timed", "hi", {})
        ms = meter.stop() / 1e6 / requests
    if meter.slices is not None:
        print(f"    {url}: {ms:.2f} ms CPU and {meter.slices / requests:.1f} wake-ups per request")
    return ms


async def measure_floors(upstream: str, requests: int, warmup: int,
                         ) -> tuple[float, float, float]:
    """(bench/sse_floor.py, bench/proxy_floor.py, the same with --task) CPU ms per request for
    the scripted timing: a bare ASGI app sending the same frames, a bare TCP forwarder in
    front of `upstream`, and that forwarder handing each frame to a task that writes it."""
    floors = []
    port = upstream.rsplit(":", 1)[1]
    for script, argv, sse in (("sse_floor.py", (), True), ("proxy_floor.py", (port,), False),
                              ("proxy_floor.py", (port, "--task"), False)):
        proc, url = _start_child(script, *argv)
        try:
            floors.append(await cpu_per_request(proc.pid, url, sse, requests, warmup))
        finally:
            proc.terminate()
            proc.wait(5)
    return floors[0], floors[1], floors[2]


async def hop_floor_ms(upstream: str, rounds: int, warmup: int) -> float:
    """Median paired TTFT difference (ms) of the raw NDJSON reader through bench/proxy_floor.py
    minus straight to `upstream`, order alternated per round: what one more process between
    client and server adds to TTFT here before any HTTP work (the relay's added-TTFT floor)."""
    proc, via = _start_child("proxy_floor.py", upstream.rsplit(":", 1)[1])
    diffs = []
    try:
        async with httpx.AsyncClient(base_url=upstream, timeout=30, trust_env=False) as d, \
                httpx.AsyncClient(base_url=via, timeout=30, trust_env=False) as h:
            for r in range(warmup + rounds):
                pair = {}
                for name in (("d", "h") if r % 2 else ("h", "d")):
                    pair[name] = await _raw_direct(d if name == "d" else h, "timed", "hi", {})
                if r >= warmup:
                    diffs.append(pair["h"].ttft_ms - pair["d"].ttft_ms)
    finally:
        proc.terminate()
        proc.wait(5)
    return statistics.median(diffs)


async def measure_busy(requests: int, warmup: int) -> tuple[float, float]:
    """(relay, TCP forwarder) CPU ms per request when the upstream sends its 21 frames with no
    gap between them: no idle time, so no wake-up per frame, only the code's own work."""
    scripted, url = _start_scripted(0.0, 20, 0.0)
    try:
        async with RelayProcess(url) as relay:
            assert relay.pid is not None  # started by `async with`
            relay_ms = await cpu_per_request(relay.pid, relay.url, True, requests, warmup)
        proxy, proxy_url = _start_child("proxy_floor.py", url.rsplit(":", 1)[1])
        try:
            proxy_ms = await cpu_per_request(proxy.pid, proxy_url, False, requests, warmup)
        finally:
            proxy.terminate()
            proxy.wait(5)
        return relay_ms, proxy_ms
    finally:
        scripted.terminate()
        scripted.wait(5)


def _start_scripted(
    first_ms: float, chunks: int, gap_ms: float
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llmtop.testing.scripted",
            "--port",
            str(port),
            "--first-ms",
            str(first_ms),
            "--chunks",
            str(chunks),
            "--gap-ms",
            str(gap_ms),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the scripted upstream did not start")


async def main_async(args: argparse.Namespace) -> int:
    print(
        "relay overhead:",
        platform.python_version(),
        platform.machine(),
        f"{os.cpu_count()} CPUs,",
        "loopback; relay, upstream and this client are separate processes",
    )
    print("load average at start: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    all_ok = True
    scripted, url = _start_scripted(50.0, 20, 10.0)
    try:
        async with RelayProcess(url) as relay:
            series = await measure(url, relay, "timed", args.rounds, args.warmup, {}, None)
        series.floor_cpu_ms, series.proxy_cpu_ms, series.task_proxy_cpu_ms = \
            await measure_floors(url, 2 * args.rounds, args.warmup)
        series.busy_cpu_ms = await measure_busy(2 * args.rounds, args.warmup)
        series.hop_ttft_ms = await hop_floor_ms(url, args.rounds, args.warmup)
        all_ok &= report(
            "(a) scripted upstream: first chunk after 50 ms, then 20 chunks 10 ms apart", series
        )
    finally:
        scripted.terminate()
        scripted.wait(5)

    if not args.no_engine:
        engine = None
        upstream = args.engine_url
        if upstream is None:
            engine = EmbeddedProcess()
            await engine.start()
            upstream = engine.host
        try:
            async with RelayProcess(upstream) as relay:
                gen = PromptGenerator(seed=7, salt="relay-bench")
                options = {
                    "temperature": 0.0,
                    "seed": 42,
                    "num_predict": args.num_predict,
                    "num_ctx": 2048,
                }
                series = await measure(upstream, relay, args.model, args.engine_rounds, args.warmup,
                                       options, lambda: gen.make(24))
            all_ok &= report(f"(b) embedded engine ({args.model}), 24-word prompts, num_predict "
                             f"{args.num_predict}", series)
        finally:
            if engine is not None:
                engine.stop()
    print("\nload average at end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    return 0 if all_ok else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--rounds", type=int, default=40, help="measured rounds, scripted upstream (default 40)"
    )
    ap.add_argument(
        "--engine-rounds", type=int, default=30, help="measured rounds, real engine (default 30)"
    )
    ap.add_argument("--warmup", type=int, default=3, help="discarded rounds first (default 3)")
    ap.add_argument("--no-engine", action="store_true", help="only the scripted upstream")
    ap.add_argument(
        "--engine-url",
        help="an Ollama-API server already running (default: start the embedded engine)",
    )
    ap.add_argument("--model", default="gemma3:270m", help="model for (b) (default gemma3:270m)")
    ap.add_argument("--json", help="write the scripted upstream's result rows here")
    ap.add_argument(
        "--num-predict", type=int, default=16, help="output tokens per request in (b) (default 16)"
    )
    args = ap.parse_args(argv)
    code = asyncio.run(main_async(args))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(ROWS, fh)
    return code


if __name__ == "__main__":
    sys.exit(main())
