"""`llmtop engines`: every LLM engine answering on this machine, with the flags that measure
it — the usual ports (`engines.discovery.KNOWN_PORTS`, plus `--ports`) and the listening
sockets of known engine processes (`probes.listening`), all probed at once."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from llmtop.commands.stopping import run_stoppable
from llmtop.engines.discovery import KNOWN_PORTS, Discovery, FoundEngine, Hint, discover
from llmtop.exitcodes import ExitCode
from llmtop.probes import listening
from llmtop.safetext import one_line

HEADERS = ("kind", "version", "address", "models", "process")
SHOWN_NAMES = 3  # model names in a table cell; the rest are counted


def socket_hints() -> tuple[list[Hint], str | None]:
    """The OS's listening sockets as discovery hints, and what could not be seen
    (`probes.listening.scan`; blocking, ~10-50 ms)."""
    found = listening.scan()
    return ([Hint(s.address, s.port, s.pid, s.process, s.engine, s.how)
             for s in found.listeners], found.note)


async def find_engines(extra_ports: Sequence[int] = (), sockets: bool = True) -> Discovery:
    """The engines on the usual ports and `extra_ports`, and (with `sockets`) on the ports
    of known engine processes' listening sockets."""
    return await discover([*KNOWN_PORTS, *extra_ports], scan=socket_hints if sockets else None)


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
