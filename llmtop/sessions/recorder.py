"""A measuring session: the engine connection, the options, the log and the probe samples.

Shared by the TUI and `llmtop run` so both record the same things the same way.
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncGenerator
from typing import Any

from llmtop.engines.connection import Connection
from llmtop.engines.events import StreamEvent
from llmtop.sessions.environment import environment
from llmtop.sessions.log import SessionLog, default_log_path
from llmtop.sessions.records import ProbeSourceRecord, RequestRecord
from llmtop.sessions.request import RequestCollector, RequestResult, chat_messages

LOCAL_SOURCE = {"kind": "local", "machine": socket.gethostname()}  # a sample from this machine


class SessionRecorder:
    """Owns the session log of one connection and numbers its requests.

    log_path: where to append (None → a new file in the user data directory).
    options: the Ollama `options` sent with every request (recorded in the header).
    Raises LogError when the log cannot be created.
    """

    def __init__(
        self,
        conn: Connection,
        options: dict[str, Any],
        log_path: str | os.PathLike[str] | None = None,
        *,
        kind: str = "session",
        extra_header: dict[str, Any] | None = None,
        think: bool | None = None,
    ) -> None:
        self.conn = conn
        self.options = dict(options)
        self.think = think
        header = {"kind": kind, **self.header(), **(extra_header or {})}
        self.log = SessionLog(log_path or default_log_path(kind), header)
        self.requests = 0
        self.in_flight: int | None = None  # id of the request being streamed, for probe records

    def header(self) -> dict[str, Any]:
        """The header record's fields: engine, host, model and its details, options, machine."""
        return {
            "engine": self.conn.engine.name,
            "engine_version": self.conn.version,
            "host": self.conn.engine.host,
            "via": "relay" if self.conn.via_relay else "direct",
            "upstream": self.conn.upstream.host,
            # an HTTP proxy between llmtop and the engine lands inside every TTFT: say so
            "proxy": getattr(self.conn.upstream, "proxy", None),
            "model": self.conn.model,
            "model_details": self.conn.info.to_dict() if self.conn.info else None,
            "options": self.options,
            "environment": environment(),
        }

    def new_request(self, prompt: str) -> RequestCollector:
        """A collector for the next request (ids count from 1)."""
        self.requests += 1
        self.in_flight = self.requests
        return RequestCollector(
            prompt=prompt, options=self.options, model=self.conn.model, request_id=self.requests
        )

    def stream(self, prompt: str, engine: Any = None) -> AsyncGenerator[StreamEvent, None]:
        """The lazy event stream for a single-turn chat with `prompt` (on `engine`, default the
        connection's own: the relay client when streaming through the relay)."""
        return (engine or self.conn.engine).stream_chat(
            self.conn.model, chat_messages(prompt), options=self.options, think=self.think
        )

    def record(self, result: RequestResult, **extra: Any) -> RequestRecord:
        """Append a finished (or cancelled) request to the log, with `extra` fields (bench
        phase, index...); returns the record as it will read back (records.RequestRecord).
        Raises RecordError when an `extra` field has the wrong type (nothing is written)."""
        self.in_flight = None
        record = RequestRecord.of(result, **extra)
        self.log.write(record)
        return record

    def record_probe(self, sample: Any) -> None:
        """Append a probe sample (a ProbeSample); safe to call from the sampler thread. Its
        `source` says where it was taken: LOCAL_SOURCE, or the agent's (probes.remote)."""
        record = sample.to_dict()
        if record.get("source") is None:
            record["source"] = LOCAL_SOURCE
        self.log.write_probe(record, self.in_flight)

    def record_probe_state(self, state: str, detail: str) -> None:
        """Log a change of the probe source (an agent "connected", "lost", "refused")."""
        self.log.write(ProbeSourceRecord(state, detail))

    def close(self) -> None:
        """Write the end record and close the log."""
        self.log.close()
