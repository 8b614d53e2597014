"""`llmtop watch --prometheus PATH`: the watched requests as a Prometheus textfile (for
node_exporter's textfile collector, or anything that reads the text format).

The metrics are prometheus_client's own (the reference client library), in a registry of
this file's, rewritten after each finished request by `write_to_textfile` (a temporary file
renamed over PATH, so a reader never sees half a file). Labels: the model and the caller
(the app's name; "unknown" when it is not local or not visible), plus the status for the
request counter.

* llmtop_watch_requests_total{model, caller, status}: finished requests.
* llmtop_watch_ttft_seconds{model, caller}: histogram of TTFT (send → first text).
* llmtop_watch_e2e_seconds{model, caller}: histogram of E2E (send → done).
* llmtop_watch_output_tokens_total / llmtop_watch_prompt_tokens_total /
  llmtop_watch_cached_prompt_tokens_total{model, caller}: the server's counts.

Bucket edges (seconds) span a cached 7B answer's tens of ms to a cold load's tens of s.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Histogram, write_to_textfile

from llmtop.sessions.records.request import RequestRecord

BUCKETS_S = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
LABELS = ("model", "caller")


class PrometheusFile:
    """The textfile at `path`, rewritten by `add` (one call per finished request; not
    thread-safe: the watch's writer thread is its only caller). Raises OSError from `add`
    when the file cannot be written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("llmtop_watch_requests", "finished requests seen by llmtop watch",
                                (*LABELS, "status"), registry=r)
        self.ttft = Histogram("llmtop_watch_ttft_seconds", "time to first token", LABELS,
                              buckets=BUCKETS_S, registry=r)
        self.e2e = Histogram("llmtop_watch_e2e_seconds", "request latency to the done chunk",
                             LABELS, buckets=BUCKETS_S, registry=r)
        self.output = Counter("llmtop_watch_output_tokens", "generated tokens (server count)",
                              LABELS, registry=r)
        self.prompt = Counter("llmtop_watch_prompt_tokens", "prompt tokens (server count)",
                              LABELS, registry=r)
        self.cached = Counter("llmtop_watch_cached_prompt_tokens",
                              "prompt tokens served from the engine's cache", LABELS, registry=r)

    def add(self, record: RequestRecord) -> None:
        """Count one finished request and rewrite the file."""
        labels = (record.model or "unknown", record.watch.caller or "unknown")
        self.requests.labels(*labels, str(record.status)).inc()
        m, stats = record.metrics, record.stats
        if m.ttft_ms is not None:
            self.ttft.labels(*labels).observe(m.ttft_ms / 1000)
        if m.e2e_ms is not None:
            self.e2e.labels(*labels).observe(m.e2e_ms / 1000)
        if stats is not None:
            for counter, value in ((self.output, stats.eval_count),
                                   (self.prompt, stats.prompt_eval_count),
                                   (self.cached, stats.prompt_cached_count)):
                if value:
                    counter.labels(*labels).inc(value)
        write_to_textfile(str(self.path), self.registry)
