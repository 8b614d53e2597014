"""`llmtop engines`: every LLM engine answering on this machine, with the flags that measure
it — the usual ports (`engines.discovery.KNOWN_PORTS`, plus `--ports`) and the listening
sockets of known engine processes (`probes.listening`), all probed at once."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from llmtop.commands.flags import port_list
from llmtop.commands.stopping import run_stoppable
from llmtop.exitcodes import ExitCode
from llmtop.safetext import one_line

if TYPE_CHECKING:
    import asyncio

    from llmtop.engines.discovery import Discovery, FoundEngine

HEADERS = ("kind", "version", "address", "models", "process")
SHOWN_NAMES = 3  # model names in a table cell; the rest are counted
# How long `run` waits past its connect for the search: it runs beside the connect (a
# loopback refusal takes microseconds; a listener gets PROBE_TIMEOUT_S), so it is done
# unless a port hangs; then the line is left out rather than the request held up.
OTHERS_WAIT_S = 0.3


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`llmtop engines`' flags: more ports to probe, --json."""
    p.add_argument("--ports", type=port_list, default=[], metavar="LIST",
                   help="more ports to probe on loopback, comma-separated (an engine started "
                   "on a port of its own; the usual ports are always probed)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


def others_task(args: argparse.Namespace) -> asyncio.Task[Discovery] | None:
    """With no engine flags (then llmtop picks the engine: Ollama at 11434, else the embedded
    one), the search of the usual ports, started beside the connect so it costs no wait;
    None when the user named an engine, an address ($OLLAMA_HOST too), a relay or a GGUF."""
    if (getattr(args, "engine", "auto") != "auto" or getattr(args, "host", None)
            or os.environ.get("OLLAMA_HOST", "").strip() or getattr(args, "relay", None)
            or getattr(args, "model_path", None)):
        return None
    import asyncio

    from llmtop.connect import find_engines

    return asyncio.create_task(find_engines(sockets=False))


async def say_others(task: asyncio.Task[Discovery] | None, in_use: str | None) -> None:
    """One stderr line naming the engines that answer besides the one in use (`in_use`: its
    URL; None when none was reached), with their flags; nothing when there are none or the
    search is not done OTHERS_WAIT_S after the connect (it is then given up)."""
    import asyncio

    from llmtop.engines.discovery import others_line

    if task is None:
        return
    done, _ = await asyncio.wait({task}, timeout=OTHERS_WAIT_S)
    if not done:
        task.cancel()
        return
    line = others_line(task.result(), in_use)
    if line:
        print(f"# {line}", file=sys.stderr)


def _names(names: tuple[str, ...] | None) -> str:
    shown = ", ".join(one_line(n, 60) for n in (names or ())[:SHOWN_NAMES])
    more = len(names or ()) - SHOWN_NAMES
    return shown + (f" (+{more})" if more > 0 else "")


def models_cell(engine: FoundEngine) -> str:
    """"loaded: a, b · 5 available", "available: a, b, c (+2)", "—" when it says nothing
    (absent is not none: "none loaded" only when the engine says so)."""
    loaded, available = engine.loaded, engine.available
    parts = []
    if loaded is not None:
        parts.append(f"loaded: {_names(loaded)}" if loaded else "none loaded")
    if available is not None:
        parts.append(f"{len(available)} available" if loaded is not None else
                     f"available: {_names(available)}" if available else "none available")
    return " · ".join(parts) or "—"


def row(engine: FoundEngine) -> tuple[str, ...]:
    """One table row: kind, version, address, models, process ("llama.cpp, pid 900")."""
    process = (f"{one_line(engine.process or '?', 40)}, pid {engine.pid}"
               if engine.pid is not None else "—")
    return (engine.kind, one_line(engine.version or "—", 40), engine.url, models_cell(engine),
            process)


def table(found: Discovery) -> list[str]:
    """The engines as aligned columns, each followed by the flags that measure it, then
    what else answered and how long the search took."""
    rows = [tuple(h.upper() for h in HEADERS), *(row(e) for e in found.engines)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADERS) - 1)]
    lines = []
    for i, cells in enumerate(rows):
        lines.append("   ".join([*(c.ljust(w) for c, w in zip(cells, widths, strict=False)),
                                 cells[-1]]).rstrip())
        if i:
            engine = found.engines[i - 1]
            lines.append(f"  flags: {engine.flags()}")
            lines += [f"  note: {one_line(n, 300)}" for n in engine.notes]
    lines += [f"also listening: {one_line(o, 300)}" for o in found.others]
    lines.append(footer(found))
    return lines


def footer(found: Discovery) -> str:
    """"(ports 1234, 5001, … probed on 127.0.0.1, then ::1, in 12 ms; the flags work with
    llmtop, run, bench and load)" and the socket scan's note."""
    ports = ", ".join(map(str, found.probed))
    note = f"; {found.notes[0]}" if found.notes else ""
    return (f"(ports {ports} probed on 127.0.0.1, then ::1, in {found.elapsed_ms:.0f} ms; the "
            f"flags work with llmtop, run, bench and load{note})")


async def _engines(args: argparse.Namespace) -> int:
    from llmtop.connect import find_engines

    found = await find_engines(args.ports or ())
    code = ExitCode.OK if found.engines else ExitCode.ENGINE_UNREACHABLE
    if args.json:
        print(json.dumps({**found.to_dict(), "exit_code": int(code)}, indent=2))
    elif found.engines:
        print("\n".join(table(found)))
    if not found.engines:
        ports = ", ".join(map(str, found.probed))
        print(f"llmtop engines: no LLM engine answers on this machine (ports {ports} on "
              "loopback, and the listening sockets of known engine processes): start one, or "
              "name the port it listens on with --ports"
              + (f" ({found.notes[0]})" if found.notes else ""), file=sys.stderr)
    return code


def main(args: argparse.Namespace) -> int:
    """`llmtop engines`: print the engines found (a table, or `--json`); exit 0 when any
    answers, 3 (ENGINE_UNREACHABLE) when none does."""
    return run_stoppable(_engines(args), "llmtop engines")
