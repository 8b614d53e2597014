"""How much `llmtop load` itself costs: its CPU per request and the highest request rate it
sustains, against a zero-latency slotted server (a child process), so every figure is the
generator's own.

    python bench/load_generator.py [--requests 300] [--concurrency 1,4,16]
                                   [--rates 25,50,100,200,400] [--tokens 10]

Closed loop: per concurrency, request throughput and the event-loop thread's CPU time per
request (`thread_time_ns`, the same figure `llmtop load` reports per level). Open loop: the
rates are tried in order; a rate is sustained when the generator kept its timetable (median
send lag under `LAG_WARN_MS`, llmtop's own warning threshold) and completed at least
`SUSTAIN_SHARE` of the rate. The highest sustained rate is printed. The server answers every
request with `--tokens` chunks and never waits (prefill and token gap 0), so each
request's wall time is the client's, the server's and the loopback's; the server's own CPU
per request is printed too, to tell which of the two is the limit.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile

import psutil

from llmtop.connect import connect
from llmtop.sessions.analysis.load import LAG_WARN_MS, LevelResult
from llmtop.sessions.measure.config import LoadConfig
from llmtop.sessions.runners.load.config import parse_levels
from llmtop.sessions.runners.load.runner import LoadRunner
from llmtop.testing.slotted import Service, SlottedProcess

SUSTAIN_SHARE = 0.95  # completed ≥ 95 % of the asked rate


async def sweep(url: str, config: LoadConfig) -> tuple[LevelResult, ...]:
    """Run one `llmtop load` sweep against `url` (log in a temporary folder); its levels."""
    conn = await connect("ollama", url, "slotted")
    try:
        with tempfile.TemporaryDirectory() as folder:
            outcome = await LoadRunner(conn, config, os.path.join(folder, "load.jsonl")).run()
            return outcome.analysis.levels
    finally:
        await conn.close()


def sustained(lv: LevelResult) -> bool:
    """The generator kept the level's timetable and the level completed its rate."""
    lag = lv.lag_ms.p50 if lv.lag_ms else None
    return (
        lag is not None
        and lag < LAG_WARN_MS
        and lv.req_per_s is not None
        and lv.req_per_s >= SUSTAIN_SHARE * lv.value * lv.requests / max(lv.requests, 1)
        and lv.ok == lv.requests
    )


async def main(args: argparse.Namespace) -> int:
    """Closed-loop levels, then rates until one is not sustained; print both tables."""
    service = Service(slots=1024, prefill_s=0.0, tokens=args.tokens, gap_s=0.0)
    common = {"prompt_tokens": 30, "max_tokens": args.tokens + 10, "use_cache": False}
    async with SlottedProcess(service) as up:
        server = psutil.Process(up.pid)
        cpu0 = sum(server.cpu_times()[:2])
        closed = await sweep(
            up.url, LoadConfig(levels=args.concurrency, requests=args.requests, **common)
        )
        served = sum(lv.requests for lv in closed)
        server_ms = (sum(server.cpu_times()[:2]) - cpu0) * 1000 / served  # + set-up requests
        best, rows = None, []
        for rate in args.rates:
            count = max(20, int(rate * args.seconds))
            (lv,) = await sweep(
                up.url,
                LoadConfig(
                    mode="rate", levels=(rate,), requests=count, arrivals="constant", **common
                ),
            )
            rows.append(lv)
            if not sustained(lv):
                break
            best = rate
    print(
        f"# llmtop load generator — {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    print(f"zero-latency slotted server, {args.tokens} chunks per reply\n")
    print("| closed loop | req/s | generator CPU ms/req | CPU share of a core | TTFT p50 ms |")
    print("|---|---|---|---|---|")
    for lv in closed:
        print(
            f"| {lv.label} | {lv.req_per_s:.0f} | {lv.generator_cpu_ms_per_request:.2f} | "
            f"{lv.generator_cpu_share:.0%} | {lv.ttft.p50:.2f} |"
        )
    print(
        f"\nthe server's own CPU: {server_ms:.2f} ms per request (one Python process: at "
        f"{1000 / server_ms:.0f} req/s it needs a whole core)"
    )
    print("\n| open loop | completed req/s | send lag p50 / p90 ms | CPU ms/req | sustained |")
    print("|---|---|---|---|---|")
    for lv in rows:
        lag = lv.lag_ms
        print(
            f"| {lv.label} | {lv.req_per_s:.0f} | {lag.p50:.2f} / {lag.p90 or float('nan'):.2f} | "
            f"{lv.generator_cpu_ms_per_request:.2f} | {'yes' if sustained(lv) else 'no'} |"
        )
    print(
        f"\nhighest sustained rate: {best if best is not None else 'none'} req/s "
        f"(lag < {LAG_WARN_MS:g} ms, ≥ {SUSTAIN_SHARE:.0%} completed)"
    )
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=300, help="closed-loop requests per level")
    p.add_argument("--concurrency", type=lambda t: parse_levels(t, True), default=(1, 4, 16))
    p.add_argument(
        "--rates", type=lambda t: parse_levels(t, False), default=(25, 50, 100, 200, 400)
    )
    p.add_argument("--seconds", type=float, default=3.0, help="open-loop seconds per rate")
    p.add_argument("--tokens", type=int, default=10)
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
