"""What the watch screen shows (no Textual): one row per request from `llmtop watch --live`'s
lines (sessions/runners/watch/session.py: "started", "progress", "finished"), the session's series
over the finished requests, and the selected request's detail.

A row's cells: #, caller, model, prompt tokens, TTFT, tok/s, cached %, status. While a
request streams its tok/s is the live chunk rate (`live_tps`), its status "streaming"; once
finished, the client decode rate (tokens after the first over their time, from the server's
eval_count: sessions/measure/timeline.py) and its status (ok, cancelled, error, ...).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from llmtop.safetext import one_line, visible
from llmtop.sessions.measure.metrics import (
    E2E,
    LOAD,
    PROMPT_EVAL,
    SERVER_DECODE,
    SERVER_PREFILL,
    TPOT,
    TTFT,
)

COLUMNS = ("#", "caller", "model", "prompt", "TTFT", "tok/s", "cached", "status")
MAX_ROWS = 500  # the oldest rows go once there are more
SERIES_KEEP = 120  # finished requests the sparklines show


def _ms(value: Any) -> str:
    if not isinstance(value, int | float):
        return "–"
    return f"{value / 1000:.2f} s" if value >= 10_000 else f"{value:.0f} ms"


def _num(value: Any, digits: int = 1) -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) else "–"


@dataclass
class WatchRows:
    """The rows by request id (newest last), the finished requests' TTFT (ms) and decode
    rate (tokens/s) series, oldest first, and the ids still streaming (`open`: read from the
    probe sampler's thread, so a set whose truth value is one read, never iterated there)."""

    rows: OrderedDict[int, dict[str, Any]] = field(default_factory=OrderedDict)
    ttft_ms: list[float] = field(default_factory=list)
    decode_tps: list[float] = field(default_factory=list)
    finished: int = 0
    open: set[int] = field(default_factory=set)

    def apply(self, line: Mapping[str, Any]) -> int | None:
        """Take one line; returns the id of the row it changed (None for a line without
        one)."""
        rid = line.get("id")
        if not isinstance(rid, int):
            return None
        row = self.rows.setdefault(rid, {"id": rid, "status": "streaming"})
        event = line.get("event", "finished")
        row.update({k: v for k, v in line.items() if v is not None or k not in row})
        if event == "finished":
            self.finished += 1
            self.open.discard(rid)
            if isinstance(ttft := line.get(TTFT.key), int | float):
                self.ttft_ms = [*self.ttft_ms, float(ttft)][-SERIES_KEEP:]
            if isinstance(line.get("decode_tps"), int | float):
                self.decode_tps = [*self.decode_tps, float(line["decode_tps"])][-SERIES_KEEP:]
        else:
            row["status"] = "streaming"
            self.open.add(rid)
        while len(self.rows) > MAX_ROWS:
            self.open.discard(self.rows.popitem(last=False)[0])
        return rid


def cells(row: Mapping[str, Any]) -> tuple[str, ...]:
    """The row's cells, in COLUMNS' order."""
    streaming = row.get("status") == "streaming"
    rate = row.get("live_tps") if streaming else row.get("decode_tps")
    cached = row.get("cached_pct")
    return (
        str(row["id"]),
        one_line(row.get("caller") or "?"),  # an app's process name, a client's model
        one_line(row.get("model") or "?"),  # name: text from outside (safetext)
        str(row["prompt_tokens"]) if isinstance(row.get("prompt_tokens"), int) else "–",
        _ms(row.get(TTFT.key)),
        _num(rate),
        f"{cached:.0f} %" if isinstance(cached, int | float) else "–",
        one_line(row.get("status") or "?"),
    )


def detail_lines(row: Mapping[str, Any], show_text: bool) -> list[str]:
    """The selected request's figures, one per line; its text only with `show_text`."""
    stats = row.get("stats") or {}
    cached = row.get("cached_prompt_tokens")
    lines = [
        (f"#{row['id']}  {row.get('endpoint') or ''}  on {row.get('listen') or '?'} "
         f"→ {row.get('upstream') or '?'}"),
        (f"caller {row.get('caller') or 'unknown'}"
         + (f" (pid {row['caller_pid']})" if row.get("caller_pid") else "")),
        f"status {row.get('status')}" + (f": {row['error']}" if row.get("error") else ""),
        (f"TTFT {_ms(row.get(TTFT.key))}   TPOT {_num(row.get(TPOT.key), 2)} ms   "
         f"E2E {_ms(row.get(E2E.key))}   ITL max {_num(row.get('itl_ms_max'))} ms"),
        (f"decode {_num(row.get('decode_tps'))} tok/s (server {_num(row.get(SERVER_DECODE.key))}"
         f")   prefill {_num(row.get(SERVER_PREFILL.key))} tok/s"),
        (f"prompt {row.get('prompt_tokens', '–')} tokens, cached "
         f"{'–' if cached is None else cached}"
         f"   output {row.get('output_tokens', '–')} ({row.get('tokens_basis') or '–'})"),
        (f"thinking chunks {row.get('thinking_chunks', '–')}   answer chunks "
         f"{row.get('answer_chunks', row.get('chunks', '–'))}"),
        (f"load {_num(row.get(LOAD.key))} ms   prompt eval {_num(row.get(PROMPT_EVAL.key))} ms"
         f"   done_reason {stats.get('done_reason') or '–'}"),
        (f"watch hop in {_num(row.get('hop_in_ms'), 3)} ms, out {_num(row.get('hop_out_ms'), 3)}"
         f" ms   verdict {row.get('verdict') or '–'}"
         + (f" ({', '.join(row['findings'])})" if row.get("findings") else "")),
    ]
    if show_text:
        lines += ["", f"prompt: {str(row.get('prompt') or '')[-400:]}"]
        if row.get("thinking"):
            lines.append(f"thinking: {str(row['thinking'])[-400:]}")
        lines.append(f"answer: {str(row.get('content') or '')[-800:]}")
    else:
        lines += ["", "text hidden (start with --show-text to see it)"]
    return [visible(line) for line in lines]  # names, errors and text come from outside
