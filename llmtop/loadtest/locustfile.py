"""llmtop's workload as a Locust user class, so Locust's distributed mode scales it out.

    locust -f llmtop/loadtest/locustfile.py --headless --host http://gpu-box:11434 \\
        --llmtop-model gemma3:270m -u 16 -r 16 --llmtop-requests-per-user 10 \\
        --llmtop-log run.jsonl [--master --expect-workers 4 | --worker --master-host H]

Each user is one closed-loop llmtop user: it streams a fresh cache-busting prompt
(`PromptGenerator`), stamps and classifies the reply as llmtop does (stream.py), reports TTFT,
TPOT and E2E through Locust's request events (names "TTFT", "TPOT", "E2E"; response_time in
ms; a failed request is one failure under "E2E"), and stops after
`--llmtop-requests-per-user` requests. Workers send every request record to the master (a
Locust custom message); the master (or a local run) writes them into an llmtop "load" session
log, one level at `-u` users, and quits once all records are in — `llmtop report LOG` reads it
like any sweep. Wall time spans the first send to the last completion by the machines' wall
clocks (keep them NTP-synchronised when workers run on several machines).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import random
import socket
import time
from datetime import datetime
from typing import Any

import gevent
import httpx
from locust import User, constant, events, task
from locust.exception import StopUser
from locust.runners import WorkerRunner

from llmtop.engines.http import Peer
from llmtop.engines.timeouts import TOKEN_TIMEOUT_S, parse_token_timeout
from llmtop.loadtest.stream import stream_chat
from llmtop.sessions.measure.config import LoadConfig
from llmtop.sessions.measure.options import GenerationOptions
from llmtop.sessions.measure.prompts import PromptGenerator
from llmtop.sessions.measure.request import RequestCollector
from llmtop.sessions.records.log import SessionLog
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.records.schema import InterruptedRecord, LevelRecord
from llmtop.sessions.runners.environment import environment as machine_environment
from llmtop.stamping.blocking import arrival_transport

logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request

MESSAGE = "llmtop_record"
READ_TIMEOUT_S = 300.0


@events.init_command_line_parser.add_listener
def _flags(parser: Any) -> None:
    group = parser.add_argument_group("llmtop")
    group.add_argument("--llmtop-model", required=True, help="model tag every request names")
    group.add_argument(
        "--llmtop-prompt-words",
        type=int,
        default=150,
        help="words per prompt (`llmtop load`'s calibration says how many make N tokens)",
    )
    group.add_argument("--llmtop-max-tokens", type=int, default=100, help="num_predict")
    group.add_argument("--llmtop-requests-per-user", type=int, default=10)
    group.add_argument("--llmtop-seed", type=int, default=42, help="the options' seed")
    group.add_argument(
        "--llmtop-token-timeout",
        type=_token_timeout,
        default=TOKEN_TIMEOUT_S,
        metavar="SECONDS",
        help="end a request as stalled after SECONDS without a token (llmtop's "
        f"--token-timeout; default and most {TOKEN_TIMEOUT_S:g})",
    )
    group.add_argument(
        "--llmtop-log",
        default="llmtop-locust.jsonl",
        help="session log the master (or a local run) writes",
    )


def _token_timeout(text: str) -> float:
    """`--llmtop-token-timeout`: engines.timeouts.parse_token_timeout, its ValueError as the
    usage error (argparse.ArgumentTypeError: the message shown, exit 2)."""
    try:
        return parse_token_timeout(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _options(opts: Any) -> dict[str, Any]:
    return GenerationOptions(seed=opts.llmtop_seed, num_predict=opts.llmtop_max_tokens).to_ollama()


class LlmtopUser(User):
    """One closed-loop user: sends its next request when the last one ends."""

    wait_time = constant(0)

    def on_start(self) -> None:
        """A connection of its own, and a prompt generator of its own (fresh prompts)."""
        host = self.host or ""
        self.client = httpx.Client(
            base_url=host, trust_env=False, timeout=httpx.Timeout(READ_TIMEOUT_S, connect=10.0),
            transport=arrival_transport(),
        )
        self.peer = Peer(host, "an Ollama server", "check --host", READ_TIMEOUT_S)
        self.prompts = PromptGenerator(random.getrandbits(32))  # never the same prompt twice
        self.sent = 0

    def on_stop(self) -> None:
        """Close the connection."""
        self.client.close()

    @task
    def chat(self) -> None:
        """Stream one request, report it to Locust, ship its record to the log's writer."""
        opts = self.environment.parsed_options
        if self.sent >= opts.llmtop_requests_per_user:
            raise StopUser()
        self.sent += 1
        words = opts.llmtop_prompt_words
        collector = RequestCollector(
            prompt=self.prompts.make(words), options=_options(opts), model=opts.llmtop_model
        )
        sent_unix = time.time_ns()
        result = stream_chat(self.client, self.peer, collector,
                             token_timeout_s=opts.llmtop_token_timeout)
        record = RequestRecord.of(
            result,
            phase="measure",
            level=0,
            index=self.sent - 1,
            prompt_words=words,
            sent_unix_ns=sent_unix,
            end_unix_ns=time.time_ns(),
            client=f"{socket.gethostname()}:{os.getpid()}",
        )
        self._report(record, result.status == "ok", str(result.failure or ""))
        runner = self.environment.runner
        if isinstance(runner, WorkerRunner):
            runner.send_message(MESSAGE, record.to_json())
        else:
            SINK.add(record.to_json())

    def _report(self, record: RequestRecord, ok: bool, error: str) -> None:
        metrics = record.metrics
        fire = self.environment.events.request.fire
        for name, value in (("TTFT", metrics.ttft_ms), ("TPOT", metrics.tpot_ms)):
            if ok and value is not None:
                fire(
                    request_type="llmtop",
                    name=name,
                    response_time=value,
                    response_length=0,
                    exception=None,
                    context={},
                )
        fire(
            request_type="llmtop",
            name="E2E",
            response_time=metrics.e2e_ms or 0,
            response_length=len(record.content),
            exception=None if ok else RuntimeError(error),
            context={},
        )


class LogSink:
    """The master's (or a local run's) session log: one "load" level at `-u` users."""

    def __init__(self) -> None:
        self.log: SessionLog | None = None
        self.records: list[RequestRecord] = []
        self.expected = 0
        self.environment: Any = None

    def open(self, env: Any) -> None:
        """Write the header and the level's start record."""
        opts = env.parsed_options
        users = int(opts.num_users or 1)
        self.environment, self.expected, self.records = (
            env,
            users * opts.llmtop_requests_per_user,
            [],
        )
        config = LoadConfig(
            levels=(users,),
            requests=self.expected,
            prompt_tokens=None,  # sized in words: the workers send prompt_words words
            prompt_words=opts.llmtop_prompt_words,
            max_tokens=opts.llmtop_max_tokens,
            seed=opts.llmtop_seed,
        )
        load = config.to_dict()
        header = {
            "kind": "load",
            "generator": "locust",
            "engine": "Ollama API via Locust",
            "host": env.host,
            "model": opts.llmtop_model,
            "options": _options(opts),
            "token_timeout_s": opts.llmtop_token_timeout,
            "environment": machine_environment(),
            "load": load,
        }
        self.log = SessionLog(opts.llmtop_log, header)
        self.log.write(LevelRecord("start", 0, users, mode="concurrency", requests=self.expected))

    def add(self, data: dict[str, Any]) -> None:
        """Number and write one request record (its JSON, as a worker sends it); after the
        last one, the level's end, and quit."""
        if self.log is None:
            return
        record = dataclasses.replace(RequestRecord.from_json(data), id=len(self.records) + 1)
        self.records.append(record)
        self.log.write(record)
        if len(self.records) == self.expected:
            self.close()
            gevent.spawn(self.environment.runner.quit)

    def close(self) -> None:
        """Write the level's end (wall time: first send to last completion) and close; an
        `interrupted` record first when fewer requests than planned arrived (the analysis
        then says the level was cut short)."""
        if self.log is None:
            return
        if len(self.records) < self.expected:  # cut short: --run-time, a stop, a lost worker
            self.log.write(InterruptedRecord(datetime.now().astimezone().isoformat()))
        if self.records:
            wall = max(r.load.end_unix_ns or 0 for r in self.records) - min(
                r.load.sent_unix_ns or 0 for r in self.records
            )
            users = self.environment.parsed_options.num_users
            self.log.write(LevelRecord("end", 0, users, wall_ns=wall))
        self.log.close()
        self.log = None


SINK = LogSink()


@events.init.add_listener
def _on_init(environment: Any, **_kw: Any) -> None:
    if not isinstance(environment.runner, WorkerRunner):
        environment.runner.register_message(MESSAGE, lambda msg, **_: SINK.add(msg.data))


@events.test_start.add_listener
def _on_start(environment: Any, **_kw: Any) -> None:
    if not isinstance(environment.runner, WorkerRunner):
        SINK.open(environment)


@events.quitting.add_listener
def _on_quit(environment: Any, **_kw: Any) -> None:
    SINK.close()
