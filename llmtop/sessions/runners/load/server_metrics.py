"""The server's own view of a sweep level: llama-server's `/metrics`, read while the level runs.

Its gauges `requests_processing` (slots busy) and `requests_deferred` (requests waiting for a
slot: the server's own queue) are only true at the moment of a scrape, so they are read every
INTERVAL_S while the level runs and their peaks kept; its counters (prompt tokens, predicted
tokens, and with a draft model the drafted and accepted tokens) are differenced between the
level's first and last scrape (engines/llama_props.py; docs/protocols.md, "llama-server").
A scrape is a small GET the server answers between decode steps; at 2 Hz it is noise far
below the requests it watches.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

INTERVAL_S = 0.5
GAUGES = ("requests_processing", "requests_deferred")  # peaks kept; absent stays absent
COUNTERS = {  # level field ← llamacpp: counter
    "prompt_tokens": "prompt_tokens_total",
    "prompt_tokens_cached": "prompt_tokens_cached_total",
    "tokens_predicted": "tokens_predicted_total",
    "draft_tokens": "spec_decode_num_draft_tokens_total",
    "draft_accepted": "spec_decode_num_accepted_tokens_total",
}
Reader = Callable[[], Awaitable[dict[str, float] | None]]


def summarize(first: Mapping[str, float], last: Mapping[str, float], peaks: Mapping[str, float],
              samples: int) -> dict[str, Any]:
    """The level's server figures: {"samples", "max_requests_processing",
    "max_requests_deferred", and each COUNTERS field's growth from `first` to `last`} (a
    counter absent from either scrape is left out; a gauge no scrape had is None, never 0:
    a `/metrics` without them — another server's, a proxy's — says nothing of slots)."""
    out: dict[str, Any] = {"source": "llama-server /metrics", "samples": samples,
                           "max_requests_processing": peaks.get("requests_processing"),
                           "max_requests_deferred": peaks.get("requests_deferred")}
    for field, name in COUNTERS.items():
        if name in first and name in last:
            out[field] = last[name] - first[name]
    return out


class ServerWatch:
    """Scrapes `read` (e.g. `OpenAIEngine.server_metrics`) every INTERVAL_S from `start()`
    until `stop()`, which returns `summarize`'s dict, or None when the server gave no
    metrics at the first scrape (not llama-server, or no `--metrics`)."""

    def __init__(self, read: Reader | None, interval_s: float = INTERVAL_S) -> None:
        self._read = read
        self._interval_s = interval_s
        self._stop = asyncio.Event()
        self._task: asyncio.Task[dict[str, Any] | None] | None = None

    def start(self) -> None:
        """Begin scraping in a task (nothing when there is no reader)."""
        if self._read is not None:
            self._task = asyncio.create_task(self._run(self._read))

    async def stop(self) -> dict[str, Any] | None:
        """Take a last scrape and return the level's figures (None without metrics)."""
        if self._task is None:
            return None
        self._stop.set()
        return await self._task

    async def _run(self, read: Reader) -> dict[str, Any] | None:
        first = await read()
        if first is None:
            return None
        last, samples = first, 1
        peaks = {k: first[k] for k in GAUGES if k in first}
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self._interval_s)
            now = await read()
            if now is None:
                continue
            samples += 1
            last = now
            peaks.update({k: max(peaks.get(k, now[k]), now[k]) for k in GAUGES if k in now})
        return summarize(first, last, peaks, samples)
