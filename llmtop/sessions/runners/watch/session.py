"""`llmtop watch`'s session: each passing request measured as llmtop measures its own, logged
(a session log of kind "watch"), printed as one NDJSON line (`--json`), counted for
Prometheus (`--prometheus PATH`), and handed to a live view.

`WatchSession` is the proxies' Watcher (servers/watch/proxy.py). Its hooks run on the event
loop that forwards the bytes, so they only number, keep and hand on; the log's writes (each
request record flushed at once, and fsync'd with those written before it as soon as no
later one waits), the NDJSON line and the Prometheus textfile are written by one writer
thread, in order, off that loop: a second app's stream is never held up by the disk.

A finished exchange becomes a `RequestResult` through the same collector as llmtop's own
requests (`sessions/measure/request.RequestCollector`: status ok / error / truncated /
cancelled, metrics by `compute_metrics`), with the send stamp at the watch's write of the
request upstream. The request's text (prompt, answer, thinking) is kept in the log only with
`bodies` (`--log-bodies`); without it the log keeps the chunks' stamps and sizes, not their
words.

The probe verdict of a request: the worst of the probe samples taken while it ran (any
NOISY sample makes it NOISY), else the sample just before it ended; None before any sample.
Every sample is kept in memory for that (RECENT_SAMPLES); the log keeps the idle ones as a
TUI session's log does (recorder.IDLE_AFTER_NS, IDLE_PROBE_PERIOD_NS): once no request has
run for 5 s, one sample every 10 s and each one whose verdict changed (a watch left running
idle logged 3.8 MB of 1 Hz samples in 17.6 minutes, some 300 MB a day).
"""

from __future__ import annotations

import json
import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter_ns
from typing import Any, TextIO

from llmtop.probes.sampler import ProbeSample
from llmtop.probes.verdict import Level
from llmtop.servers.watch.proxy import Exchange
from llmtop.sessions.measure.metrics import (
    E2E,
    LOAD,
    PROMPT_EVAL,
    SERVER_DECODE,
    SERVER_PREFILL,
    TPOT,
    TTFT,
    TTFT_CONTENT,
)
from llmtop.sessions.measure.request import RequestCollector, RequestResult
from llmtop.sessions.records.log import SessionLog, default_log_path
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.runners.environment import environment
from llmtop.sessions.runners.recorder import IDLE_AFTER_NS, IDLE_PROBE_PERIOD_NS
from llmtop.sessions.runners.watch.prometheus import PrometheusFile

LIVE_EVERY_NS = 250_000_000  # a streaming request's progress lines: 4 a second at most
TEXT_TAIL = 2000  # characters of the answer a live line carries with show_text
RECENT_SAMPLES = 600  # probe samples kept for per-request verdicts (10 min at 1 Hz)
RECENT_FINISHED = 16  # finished requests kept in memory (the log has them all)
NS_PER_MS = 1_000_000


@dataclass(frozen=True, slots=True)
class Watched:
    """One finished request: its result (events, metrics) and its record as logged."""

    result: RequestResult
    record: RequestRecord
    exchange: Exchange


class WatchSession:
    """Numbers, measures and records the requests of one `llmtop watch`.

    pairs: (listen "host:port", upstream URL) of each proxy; log_path: where the log goes
    (None: a new one in the user data directory); bodies: log the requests' text; out: where
    `--json` lines go (None: no lines); prometheus: a textfile to rewrite after each request
    (None: none); on_update: called on the loop after a request started, progressed or
    finished (a live view; keep it cheap). live: `out` also gets a line when a request
    starts and as it streams (`live_fields`, "event" "started" / "progress"; the finished
    line then has "event": "finished"), at most one progress line per request every
    LIVE_EVERY_NS — how the watch screen, another process, follows the traffic; show_text:
    those lines carry the prompt and the answer so far (never the log); keep: how many of
    the last finished requests `finished_list` holds (a watch runs for days: what is older is
    in the log, and `finished_count` counts them all). Raises LogError when the log cannot be
    created.
    """

    def __init__(self, pairs: Sequence[tuple[str, str]], *, log_path: str | None = None,
                 bodies: bool = False, out: TextIO | None = None,
                 prometheus: str | os.PathLike[str] | None = None,
                 on_update: Callable[[Exchange], None] | None = None,
                 live: bool = False, show_text: bool = False,
                 keep: int = RECENT_FINISHED) -> None:
        header = {"kind": "watch", "upstream": pairs[0][1] if pairs else None, "via": "watch",
                  "environment": environment(),
                  "watch": {"pairs": [{"listen": a, "upstream": b} for a, b in pairs],
                            "bodies_logged": bodies}}
        self.log = SessionLog(log_path or default_log_path("watch"), header)
        self.bodies = bodies
        self.out = out
        self.prometheus = PrometheusFile(Path(prometheus)) if prometheus else None
        self.on_update = on_update
        self.live, self.show_text = live and out is not None, show_text
        self._live_ns: dict[int, int] = {}  # request id → when its last progress line went
        self.count = 0
        self.streaming: dict[int, Exchange] = {}
        self.finished_list: deque[Watched] = deque(maxlen=keep)
        self.finished_count = 0
        self._samples: deque[ProbeSample] = deque(maxlen=RECENT_SAMPLES)
        self.active_ns = perf_counter_ns()  # when a request last started or ended
        self._last_logged: tuple[int, Any] | None = None  # (t_ns, verdict key) last logged
        self.probes_thinned = 0  # idle samples not logged (`keep_probe`)
        self._lock = threading.Lock()
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="llmtop-watch-log")

    # ---------------------------------------------------------------- the proxies' hooks

    def started(self, exchange: Exchange) -> None:
        """A measured request arrived: number it."""
        self.count += 1
        exchange.id = self.count
        self.active_ns = perf_counter_ns()
        self.streaming[exchange.id] = exchange
        if self.live:
            self._live_ns[exchange.id] = 0
            self._writer.submit(self._line, {"event": "started", "id": exchange.id,
                                             "listen": exchange.listen,
                                             "endpoint": exchange.path})
        if self.on_update is not None:
            self.on_update(exchange)

    def progressed(self, exchange: Exchange) -> None:
        """More of its response arrived."""
        if self.live:
            now = perf_counter_ns()
            if now - self._live_ns.get(exchange.id, 0) >= LIVE_EVERY_NS:
                self._live_ns[exchange.id] = now
                line = live_fields(exchange, now, self.show_text)
                self._writer.submit(self._line, line)
        if self.on_update is not None:
            self.on_update(exchange)

    def finished(self, exchange: Exchange) -> None:
        """It ended: measure it now, write it in the writer thread."""
        self.streaming.pop(exchange.id, None)
        self._live_ns.pop(exchange.id, None)
        self.active_ns = perf_counter_ns()
        watched = self.measure(exchange)
        self.finished_count += 1
        self.finished_list.append(watched)
        self._writer.submit(self._write, watched, self.finished_count)
        if self.on_update is not None:
            self.on_update(exchange)

    # ---------------------------------------------------------------- measuring

    def measure(self, exchange: Exchange) -> Watched:
        """The result and record of a finished exchange (pure but for the probe samples)."""
        facts = exchange.facts
        collector = RequestCollector(prompt=facts.prompt, options=dict(facts.options),
                                     model=facts.model or "", request_id=exchange.id,
                                     wall_start=exchange.wall_start, sent_ns=exchange.send_ns)
        for event in exchange.events:
            collector.add(event)
        result = collector.finish(cancelled=exchange.cancelled)
        verdict, findings = self.verdict_during(exchange.received_ns,
                                                exchange.end_ns or exchange.received_ns)
        caller = exchange.caller
        fields: dict[str, Any] = {
            "endpoint": exchange.path, "upstream": exchange.upstream, "listen": exchange.listen,
            "caller": caller.app if caller else None,
            "caller_category": caller.category if caller else None,
            "caller_pid": caller.pid if caller else None,
            "http_status": exchange.status_code,
            "hop_in_ms": _ms(exchange.hop_in_ns), "hop_out_ms": _ms(exchange.hop_out_ns),
            "pipeline_wait_ms": _ms(exchange.pipeline_wait_ns),
            "probe_verdict": verdict, "probe_findings": list(findings),
        }
        if not self.bodies:
            fields.update(prompt="", content="", thinking="", chunks=[
                [e.t_ns - result.sent_ns, "", ""] for e in result.events
                if not e.done or e.has_text])
        return Watched(result, RequestRecord.of(result, **fields), exchange)

    def sampled(self, sample: ProbeSample) -> None:
        """A probe sample (from the sampler's thread): kept for verdicts, and logged unless
        idle and like the last one logged (`keep_probe`)."""
        with self._lock:
            self._samples.append(sample)
        running = min(self.streaming, default=None)  # one C-level pass: safe beside the loop
        if not self.keep_probe(sample, running is not None):
            self.probes_thinned += 1
            return
        self._writer.submit(self.log.write_probe, sample.to_dict(), running)

    def keep_probe(self, sample: ProbeSample, running: bool) -> bool:
        """Whether to log `sample`: always while a request streams and for IDLE_AFTER_NS
        after one started or ended; idle, one every IDLE_PROBE_PERIOD_NS and each one whose
        verdict (quiet or not, and its finding codes) differs from the last one logged."""
        verdict = sample.verdict
        key = (verdict.quiet, tuple(sorted(f.code for f in verdict.findings)))
        idle = not running and sample.t_ns - self.active_ns > IDLE_AFTER_NS
        last = self._last_logged
        if (idle and last is not None and key == last[1]
                and sample.t_ns - last[0] < IDLE_PROBE_PERIOD_NS):
            return False
        self._last_logged = (sample.t_ns, key)
        return True

    def verdict_during(self, start_ns: int, end_ns: int) -> tuple[str | None, tuple[str, ...]]:
        """("QUIET" | "NOISY" | None, the WARN/FAIL finding codes) over [start_ns, end_ns]:
        the samples taken then, else the last one before end_ns (module docstring)."""
        with self._lock:
            during = [s for s in self._samples if start_ns <= s.t_ns <= end_ns]
            before = [s for s in self._samples if s.t_ns < start_ns]
        chosen = during or before[-1:]
        if not chosen:
            return None, ()
        codes: list[str] = []
        for sample in chosen:
            for finding in sample.verdict.findings:
                if finding.level is not Level.INFO and finding.code not in codes:
                    codes.append(finding.code)
        quiet = all(s.verdict.quiet for s in chosen)
        return ("QUIET" if quiet else "NOISY"), tuple(codes)

    # ---------------------------------------------------------------- the writer thread

    def _line(self, fields: dict[str, Any]) -> None:
        assert self.out is not None
        self.out.write(json.dumps(fields, ensure_ascii=False, separators=(",", ":")) + "\n")
        self.out.flush()

    def _write(self, watched: Watched, number: int) -> None:
        # flushed at once; fsync'd when no later request waits to be written (a group
        # commit): under a busy app one fsync covers every record written since the last,
        # so the writer keeps up and its queue, which holds each waiting request whole,
        # stays short (an fsync per record let 1,400 requests queue in a 10,000-request soak)
        self.log.write(watched.record, sync=number == self.finished_count)
        if self.out is not None:
            fields = line_fields(watched)
            if self.live:
                fields = {"event": "finished", **fields}
                if self.show_text and not self.bodies:
                    fields.update(prompt=watched.result.prompt,
                                  content=watched.result.content[-TEXT_TAIL:],
                                  thinking=watched.result.thinking[-TEXT_TAIL:])
            self._line(fields)
        if self.prometheus is not None:
            self.prometheus.add(watched.record)

    def close(self) -> None:
        """Write what is pending, then close the log (its end record)."""
        self._writer.shutdown(wait=True)
        self.log.close()


def _ms(ns: int | None) -> float | None:
    return None if ns is None else round(ns / NS_PER_MS, 3)


def live_fields(exchange: Exchange, now_ns: int, show_text: bool) -> dict[str, Any]:
    """A streaming request's progress line: id, caller, model, ttft_ms (send → first text;
    None before it), chunks (text chunks so far), live_tps (chunks after the first over the
    time since it: a chunk is about a token on Ollama and llama-server), elapsed_ms; with
    show_text the prompt and the tail of the answer and thinking so far."""
    events = exchange.events
    texts = [e.t_ns for e in events if e.has_text]
    ttft = (texts[0] - exchange.send_ns) / NS_PER_MS if texts else None
    span = (texts[-1] - texts[0]) / 1e9 if len(texts) > 1 else 0.0
    line: dict[str, Any] = {
        "event": "progress", "id": exchange.id, "model": exchange.facts.model,
        "caller": exchange.caller.app if exchange.caller else None,
        TTFT.key: None if ttft is None else round(ttft, 3), "chunks": len(texts),
        "live_tps": round((len(texts) - 1) / span, 1) if span > 0 else None,
        "elapsed_ms": round((now_ns - exchange.received_ns) / NS_PER_MS, 1),
    }
    if show_text:
        line.update(prompt=exchange.facts.prompt,
                    content="".join(e.content for e in events)[-TEXT_TAIL:],
                    thinking="".join(e.thinking for e in events)[-TEXT_TAIL:])
    return line


def ndjson_line(watched: Watched) -> str:
    """The `--json` line of one finished request (see `line_fields`)."""
    return json.dumps(line_fields(watched), ensure_ascii=False, separators=(",", ":"))


def line_fields(watched: Watched) -> dict[str, Any]:
    """One request's figures as `llmtop watch --json` prints them: times in ms, rates in
    tokens/s, counts in tokens; None where n/a. cached_pct = cached prompt tokens / prompt
    tokens × 100 (the server's own counts). thinking_chunks / answer_chunks: text chunks
    carrying thinking / answer text (about one token each on Ollama and llama-server).
    prompt / content / thinking only when the session logs bodies."""
    rec, result = watched.record, watched.result
    m, stats = rec.metrics, rec.stats
    prompt_n = stats.prompt_eval_count if stats else None
    cached = stats.prompt_cached_count if stats else None
    line: dict[str, Any] = {
        "id": rec.id, "started_at": rec.started_at, "listen": rec.watch.listen,
        "upstream": rec.watch.upstream, "endpoint": rec.watch.endpoint, "model": rec.model or None,
        "caller": rec.watch.caller, "caller_pid": rec.watch.caller_pid, "status": str(rec.status),
        "http_status": rec.watch.http_status, "error": rec.error,
        "error_kind": str(rec.error_kind) if rec.error_kind else None,
        TTFT.key: m.ttft_ms, TTFT_CONTENT.key: m.ttft_content_ms, TPOT.key: m.tpot_ms,
        E2E.key: m.e2e_ms, "itl_ms_max": max(m.itl_ms) if m.itl_ms else None,
        "decode_tps": m.client_decode_tps, SERVER_PREFILL.key: m.server_prefill_tps,
        SERVER_DECODE.key: m.server_decode_tps, LOAD.key: m.load_ms,
        PROMPT_EVAL.key: m.prompt_eval_ms, "prompt_tokens": prompt_n,
        "cached_prompt_tokens": cached,
        "cached_pct": round(100 * cached / prompt_n, 1) if cached is not None and prompt_n
        else None,
        "output_tokens": m.output_tokens, "tokens_basis": m.tokens_basis,
        "thinking_chunks": sum(1 for e in result.events if e.thinking),
        "answer_chunks": sum(1 for e in result.events if e.content),
        "buffered": m.buffered, "hop_in_ms": rec.watch.hop_in_ms,
        "hop_out_ms": rec.watch.hop_out_ms, "pipeline_wait_ms": rec.watch.pipeline_wait_ms,
        "verdict": rec.watch.probe_verdict, "findings": list(rec.watch.probe_findings),
        "stats": stats.to_dict() if stats else None,
    }
    if rec.prompt or rec.content or rec.thinking:
        line.update(prompt=rec.prompt, content=rec.content, thinking=rec.thinking)
    return line


__all__ = ["WatchSession", "Watched", "line_fields", "live_fields", "ndjson_line"]
