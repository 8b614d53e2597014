"""Decode and prefill rates of each llama.cpp configuration the embedded engine can load with.

    python bench/llama_configs.py [--requests 5] [--num-predict 64] [--json FILE]

Two real embedded engines are started side by side, one forced to each configuration
(LLMTOP_LLAMA_REPACK=on / off: llmtop/servers/embedded/llama_config.py), and requests alternate
between them (on, off, on, off…), so both see the same machine. Each request has its own
~100-token prompt (a distinct first word: no prefix-cache reuse) and a `num_predict`-token
answer; the rates are the engine's own counters (eval_count / eval_duration, prompt_eval_count
/ prompt_eval_duration), medians over the requests. A configuration that crashes on this CPU
is reported as such, with its signal. Informational rows: no target (the self-test picks at
run time; this says by how much).
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
    body = {"model": "gemma3:270m", "prompt": f"{i} {TEXT}", "stream": False, "raw": True,
            "options": {"num_predict": num_predict, "temperature": 0, "seed": 1}}
    r = await client.post(f"{host}/api/generate", json=body)
    r.raise_for_status()
    d = r.json()
    return {"decode_tps": d["eval_count"] / (d["eval_duration"] / 1e9),
            "prefill_tps": d["prompt_eval_count"] / (d["prompt_eval_duration"] / 1e9)}


async def main_async(requests: int, num_predict: int) -> list[dict[str, Any]]:
    engines: dict[str, EmbeddedProcess | str] = {}
    for force in ("on", "off"):
        try:
            engines[force] = await engine_for(force)
        except Exception as exc:  # noqa: BLE001 - a configuration that dies is a result
            engines[force] = str(exc)
    rates: dict[str, list[dict[str, Any]]] = {f: [] for f in engines}
    try:
        async with httpx.AsyncClient(timeout=300, trust_env=False) as client:
            for e in list(engines.values()):  # warm-up: the model's load, outside the rates
                if isinstance(e, EmbeddedProcess):
                    await one(client, e.host, -1, 8)
            for i in range(requests):
                for force, e in engines.items():
                    if isinstance(e, EmbeddedProcess):
                        try:
                            rates[force].append(await one(client, e.host, i, num_predict))
                        except httpx.HTTPError as exc:
                            engines[force] = f"failed mid-run: {exc}"
    finally:
        for e in engines.values():
            if isinstance(e, EmbeddedProcess):
                e.stop()
    rows = []
    for force, e in engines.items():
        label = f"repack {force}"
        if not rates[force]:
            rows.append({"metric": f"{label}: {e}", "measured": None, "unit": "",
                         "target": None, "met": None})
            continue
        for key, unit in (("decode_tps", "tok/s"), ("prefill_tps", "tok/s")):
            values = [r[key] for r in rates[force]]
            rows.append({"metric": f"{key.split('_')[0]} rate, llama.cpp {label} (median of "
                                   f"{len(values)})", "measured": statistics.median(values),
                         "unit": unit, "target": None, "met": None,
                         "values": [round(v, 1) for v in values]})
    return rows


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
