"""The wire format of `llmtop agent`, shared by the agent (llmtop/servers/agent/) and its client
(probes/remote.py).

Routes (all `GET`, JSON unless said; every one needs `Authorization: Bearer TOKEN` when the
agent was given a token):
* `PATH_INFO`: `{"machine", "llmtop_version", "engine_host", "engine": {identity},
  "interval_s", "share_cmdlines", "agent_ns"}`.
* `PATH_CLOCK`: `{"agent_ns"}`, the agent's clock (`perf_counter_ns`) when it answered; the
  client times the round trip around it (`remote.estimate_offset`).
* `PATH_SAMPLE`: one envelope, from a sample taken for this request (preflight's one-shot).
* `PATH_STREAM`: `application/x-ndjson`, one envelope per line as the agent samples (every
  `interval_s`), and a `{"type": "ping", "agent_ns"}` line when no sample was due for
  `PING_S`, so a client can tell a slow agent from a quiet one.

An envelope is `{"type": "sample", "agent_ns", "machine", "sample": ProbeSample.to_dict(),
"engine": {"findings": [...], "reason": str | None}, "cmdlines": {app: [cmdline, ...]} |
None}`: `sample.t_ns` and `agent_ns` are on the agent's clock; `engine.findings` are the
agent's `/api/ps` findings (None with a `reason` when it could not read them); `cmdlines`
only when the agent runs with `--share-cmdlines` (command lines can hold secrets).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import TypeAdapter

from llmtop.probes.sampler import ProbeSample
from llmtop.probes.verdict import Finding

DEFAULT_PORT = 11500
PATH_INFO = "/v1/info"
PATH_CLOCK = "/v1/clock"
PATH_SAMPLE = "/v1/sample"
PATH_STREAM = "/v1/stream"
NDJSON = "application/x-ndjson"
PING_S = 2.0  # a stream line at least this often, sample or ping
TOKEN_ENV = "LLMTOP_AGENT_TOKEN"  # the client's token when no --probes-token-file is given

_SAMPLE: TypeAdapter[ProbeSample] | None = None  # built on first use (~0.1 s)
_FINDINGS: TypeAdapter[tuple[Finding, ...]] | None = None


def envelope(
    sample: ProbeSample,
    agent_ns: int,
    machine: str,
    engine: dict[str, Any],
    cmdlines: dict[str, list[str]] | None = None,
    clock_offset_ns: int = 0,
) -> dict[str, Any]:
    """The JSON-ready envelope of one sample (module docstring). `clock_offset_ns` is added to
    the sample's own stamp (a test's injected offset; 0 otherwise)."""
    body = sample.to_dict()
    body["t_ns"] = sample.t_ns + clock_offset_ns
    return {"type": "sample", "agent_ns": agent_ns, "machine": machine, "sample": body,
            "engine": engine, "cmdlines": cmdlines}


def encode_line(obj: dict[str, Any]) -> bytes:
    """One NDJSON line (compact JSON + newline)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def decode_sample(body: dict[str, Any]) -> ProbeSample:
    """The `sample` part of an envelope as the `ProbeSample` it was made from (pydantic, lax:
    lists become tuples, strings enums; keys ProbeSample does not declare are ignored).
    Raises pydantic.ValidationError for a body of the wrong shape."""
    global _SAMPLE
    if _SAMPLE is None:
        _SAMPLE = TypeAdapter(ProbeSample)
    return _SAMPLE.validate_python(body)


def decode_findings(items: Any) -> tuple[Finding, ...]:
    """A list of finding dicts (`preflight.finding_dict` shape) as Findings; () for None.
    Raises pydantic.ValidationError for a list of the wrong shape."""
    global _FINDINGS
    if not items:
        return ()
    if _FINDINGS is None:
        _FINDINGS = TypeAdapter(tuple[Finding, ...])
    return _FINDINGS.validate_python(items)
