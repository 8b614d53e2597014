"""Decode and prefill rates of each llama.cpp configuration the embedded engine can load with.

    python bench/llama_configs.py [--requests 5] [--num-predict 64] [--json FILE]

Two real embedded engines are started side by side, one forced to each configuration
(LLMTOP_LLAMA_REPACK=on / off: llmtop/servers/embedded/llama_config.py), and requests alternate
between them (on, off, on, off…), so both see the same machine. Each request has its own
~100-token prompt (a distinct first word: no prefix-cache reuse) and a `num_predict`-token
answer; the rates are the engine's own counters (eval_count / eval_duration, prompt_eval_count
/ prompt_eval_duration), medians over the requests. A configuration that crashes on this CPU
is a result, not a failed benchmark: its row says "crashed at the first request: the embedded
engine was killed by SIGILL (illegal instruction)…" (or after how many requests, or that it did
not start), the other configuration is measured alone, and the script exits 0. Informational
rows: no target (the self-test picks at run time; this says by how much).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
from typing import Any

import httpx

from llmtop.servers.child import EmbeddedProcess

TEXT = ("Describe, in plain words, how a lighthouse keeper spent a long winter on a small "
        "island far from the coast, what the keeper ate, what the keeper read, how the lamp "
        "was kept burning through the storms, and what the keeper thought about at night "
        "while the sea beat against the rocks below the tower.")


async def engine_for(force: str) -> EmbeddedProcess:
    """An embedded engine child forced to one configuration."""
    old = os.environ.get("LLMTOP_LLAMA_REPACK")
    os.environ["LLMTOP_LLAMA_REPACK"] = force
    try:
        child = EmbeddedProcess()
        await child.start()
        return child
    finally:
        if old is None:
            os.environ.pop("LLMTOP_LLAMA_REPACK", None)
        else:
            os.environ["LLMTOP_LLAMA_REPACK"] = old


async def one(client: httpx.AsyncClient, host: str, i: int, num_predict: int) -> dict[str, Any]:
    """One request's rates (tok/s) from the engine's own counters. Raises httpx.HTTPError
    (the engine disconnected: "Server disconnected") or ValueError (an error status with its
    body, an answer that is not JSON, without the counters or with a zero duration)."""
    body = {"model": "gemma3:270m", "prompt": f"{i} {TEXT}", "stream": False, "raw": True,
            "options": {"num_predict": num_predict, "temperature": 0, "seed": 1}}
    r = await client.post(f"{host}/api/generate", json=body)
    if r.status_code != 200:
        raise ValueError(f"HTTP {r.status_code}: {r.text[:300]}")
    d = r.json()
    try:
        return {"decode_tps": d["eval_count"] / (d["eval_duration"] / 1e9),
                "prefill_tps": d["prompt_eval_count"] / (d["prompt_eval_duration"] / 1e9)}
    except (KeyError, TypeError, ZeroDivisionError) as exc:
        raise ValueError(f"no usable counters in the answer ({type(exc).__name__}: {exc}): "
                         f"{str(d)[:200]}") from exc


async def why_failed(engine: EmbeddedProcess, exc: Exception) -> str:
    """What became of a request that failed: the engine's death ("the embedded engine was
    killed by SIGILL (illegal instruction); log PATH", its log's last lines printed to
    stderr) when it died, else the error itself. Waits up to DEATH_WAIT_S for a dying engine
    to be reaped (the broken connection can arrive before the kernel reports the exit)."""
    death = await asyncio.to_thread(engine.death)
    if death is None:
        return f"{type(exc).__name__}: {exc}"
    print(f"the {death.label} on {engine.host} {death.how()}; the last lines of its log:",
          *death.tail, sep="\n    ", file=sys.stderr)
    return f"the {death.label} {death.how()}; log {death.log_path}"


async def attempt(client: httpx.AsyncClient, engine: EmbeddedProcess, i: int,
                  num_predict: int) -> dict[str, Any] | str:
    """One request's rates, or why it failed (a configuration that dies is a result)."""
    try:
        return await one(client, engine.host, i, num_predict)
    except (httpx.HTTPError, ValueError) as exc:
        return await why_failed(engine, exc)


def failed_text(done: int, reason: str) -> str:
    """"crashed at the first request: …" (nothing measured: the warm-up counts as the first)
    or "failed after 3 measured requests: …"."""
    if done == 0:
        return f"crashed at the first request: {reason}"
    return f"failed after {done} measured request{'s' * (done != 1)}: {reason}"


async def measure(engines: dict[str, EmbeddedProcess | str], requests: int, num_predict: int,
                  ) -> dict[str, list[dict[str, Any]]]:
    """Warm each engine up (the model's load, outside the rates), then alternate `requests`
    rounds between them. An engine whose request fails is replaced in `engines` by the text
    saying how (failed_text), and gets no more requests; the other goes on alone."""
    rates: dict[str, list[dict[str, Any]]] = {f: [] for f in engines}
    async with httpx.AsyncClient(timeout=300, trust_env=False) as client:
        for force, e in list(engines.items()):
            if isinstance(e, EmbeddedProcess):
                got = await attempt(client, e, -1, 8)
                if isinstance(got, str):
                    engines[force] = failed_text(0, got)
        for i in range(requests):
            for force, e in list(engines.items()):
                if isinstance(e, EmbeddedProcess):
                    got = await attempt(client, e, i, num_predict)
                    if isinstance(got, str):
                        engines[force] = failed_text(len(rates[force]), got)
                        e.stop()
                    else:
                        rates[force].append(got)
    return rates


def rows_for(engines: dict[str, EmbeddedProcess | str],
             rates: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per configuration: its decode and prefill medians (tok/s) over the requests it
    answered, and a row saying how it failed when it did (measured None, no target: a
    configuration that dies on this CPU is a finding, not a failed benchmark)."""
    rows = []
    for force, e in engines.items():
        label = f"repack {force}"
        for key in ("decode_tps", "prefill_tps") if rates[force] else ():
            values = [r[key] for r in rates[force]]
            rows.append({"metric": f"{key.split('_')[0]} rate, llama.cpp {label} (median of "
                                   f"{len(values)})", "measured": statistics.median(values),
                         "unit": "tok/s", "target": None, "met": None,
                         "values": [round(v, 1) for v in values]})
        if isinstance(e, str):
            rows.append({"metric": f"llama.cpp {label}: {e}", "measured": None, "unit": "",
                         "target": None, "met": None})
    return rows


async def main_async(requests: int, num_predict: int) -> list[dict[str, Any]]:
    """Start both engines (one that cannot start is a result), measure, stop them."""
    engines: dict[str, EmbeddedProcess | str] = {}
    started: list[EmbeddedProcess] = []
    for force in ("on", "off"):
        try:
            child = await engine_for(force)
        except Exception as exc:  # noqa: BLE001 - a configuration that dies is a result
            engines[force] = f"did not start: {exc}"
            continue
        engines[force] = child
        started.append(child)
    try:
        rates = await measure(engines, requests, num_predict)
    finally:
        for child in started:
            child.stop()
    return rows_for(engines, rates)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=5)
    ap.add_argument("--num-predict", type=int, default=64)
    ap.add_argument("--json", help="write the result rows here")
    args = ap.parse_args(argv)
    rows = asyncio.run(main_async(args.requests, args.num_predict))
    for r in rows:
        shown = "—" if r["measured"] is None else f"{r['measured']:.1f} {r['unit']}"
        print(f"{r['metric']}: {shown} {r.get('values', '')}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
