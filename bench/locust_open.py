"""An open-loop Locust workload on FastHttpUser, for bench/load_peers.py (not llmtop's own
Locust class, llmtop/loadtest/locustfile.py, which is closed loop and streams with llmtop's
own stamping: this one is what a Locust user writes with Locust's fastest client).

    LP_RATE=50 LP_COUNT=100 LP_OUT=out.jsonl locust -f bench/locust_open.py --headless \\
        -u 16 -r 1000 --host http://127.0.0.1:PORT

Request k of LP_COUNT is due at t0 + k / LP_RATE (t0: 0.2 s after the first user starts);
each of the users takes the next k, sleeps (gevent) until it is due, then streams one
/v1/chat/completions request through FastHttpUser (`stream=True`, `iter_content`). Per
request one JSON line in LP_OUT, written when all are done: its prompt, its lag (send −
due, ms: the scheduled-vs-actual figure Locust itself does not report) and its TTFT (send
to the first read that holds a text delta, ms, `time.perf_counter_ns()`). Then it quits.
"""

from __future__ import annotations

import itertools
import json
import os
import time

import gevent
from locust import FastHttpUser, constant, task
from locust.exception import StopUser

RATE = float(os.environ.get("LP_RATE", "10"))
COUNT = int(os.environ.get("LP_COUNT", "20"))
OUT = os.environ.get("LP_OUT", "locust-open.jsonl")
MODEL = os.environ.get("LP_MODEL", "truth:latest")

_next = itertools.count()
_t0: list[int] = []
_rows: list[dict[str, object]] = []


class OpenLoopUser(FastHttpUser):
    """Takes the next slot of the shared timetable; streams one request in it."""

    wait_time = constant(0)

    def on_start(self) -> None:
        """Open the user's connection first (as llmtop's warm-up does), so that no TTFT
        holds a TCP connect."""
        self.client.get("/v1/models")

    @task
    def chat(self) -> None:
        """One due request: wait for its slot, stream it, keep its lag and TTFT."""
        if not _t0:
            _t0.append(time.perf_counter_ns() + 200_000_000)
        k = next(_next)
        if k >= COUNT:
            raise StopUser()
        due = _t0[0] + round(k * 1e9 / RATE)
        wait = due - time.perf_counter_ns()
        if wait > 0:
            gevent.sleep(wait / 1e9)
        prompt = f"locust request {k} of {COUNT} at {RATE:g} per second"
        body = {"model": MODEL, "stream": True, "max_tokens": 20,
                "messages": [{"role": "user", "content": prompt}]}
        sent = time.perf_counter_ns()
        first = None
        with self.client.post("/v1/chat/completions", json=body, stream=True,
                              catch_response=True) as resp:
            for piece in resp.iter_content(chunk_size=1024, decode_content=False):
                if first is None and b'"content"' in piece:
                    first = time.perf_counter_ns()
        _rows.append({"prompt": prompt, "lag_ms": (sent - due) / 1e6,
                      "ttft_ms": None if first is None else (first - sent) / 1e6})
        if len(_rows) == COUNT:
            with open(OUT, "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in _rows)
            gevent.spawn(self.environment.runner.quit)
