"""Probe samples from `llmtop agent` on the engine's machine, as the local sampler's samples.

`AgentSampler` has `ProbeSampler`'s interface (`start`, `stop`, `set_interval`, `sample_once`,
`latest`, `running`, `interval_s`) so the TUI, `run`, `bench` and `preflight` take either. It
reads the agent's NDJSON stream (probes/wire.py) in a daemon thread and turns each envelope
into a `RemoteSample`: the agent's `ProbeSample`, its stamp mapped onto this machine's clock
(agent_clock.py), its verdict re-judged with *this* llmtop's thresholds plus the agent's
`/api/ps` findings, and a `SampleSource` saying where it came from (logged with it).

Never blocking a run: `start` returns at once; a dead, slow or refusing agent only means no
samples (the panel then shows the last one's age, stale), retried every RETRY_S; `stop` waits
at most STOP_WAIT_S. `on_state` hears "connected", "lost" and "refused" with a reason.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import httpx

from llmtop.probes import wire
from llmtop.probes.agent_clock import ClockEstimate, estimate_offset
from llmtop.probes.energy import EnergyReader
from llmtop.probes.engine_identity import is_local_host
from llmtop.probes.processes import PidSource
from llmtop.probes.sampler import ProbeSample, ProbeSampler, SamplerState
from llmtop.probes.verdict import DEFAULT, Finding, Thresholds, Verdict, evaluate

log = logging.getLogger(__name__)

CLOCK_EXCHANGES = 8  # round trips per offset estimate; the shortest wins
CLOCK_REFRESH_S = 30.0  # re-estimate this often (two crystals drift ~10-100 µs/s apart)
RETRY_S = 1.0  # wait between attempts to reach a lost agent
CONNECT_TIMEOUT_S = 2.0
STALL_S = 3 * wire.PING_S  # no line for this long: the agent is gone or stuck; reconnect


class AgentError(Exception):
    """The agent could not be used: unreachable, refused the token (`refused`), or answered
    something that is not the agent's wire format. The message says which and what to do."""

    def __init__(self, message: str, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


@dataclass(frozen=True, slots=True)
class AgentTarget:
    """Where the agent is: its base URL ("http://gpu-box:11500") and the token to send
    (None: none)."""

    url: str
    token: str | None = None

    @classmethod
    def from_flags(cls, url: str, token_file: str | None = None) -> AgentTarget:
        """From `--probes URL` and `--probes-token-file PATH` (else $LLMTOP_AGENT_TOKEN).
        "gpu-box" means http://gpu-box:11500. Raises AgentError for a URL with a path or a
        bad port, or a token file that cannot be read."""
        text = url.strip()
        try:
            parsed = httpx.URL(text if "://" in text else f"http://{text}")
            port = parsed.port or wire.DEFAULT_PORT
        except (httpx.InvalidURL, ValueError) as exc:
            raise AgentError(f"--probes {url!r} is not an address: {exc}") from None
        if (
            parsed.scheme not in ("http", "https")
            or not parsed.host
            or parsed.path not in ("", "/")
        ):
            raise AgentError(f"--probes {url!r}: give http://HOST[:PORT] of `llmtop agent`")
        host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
        token = os.environ.get(wire.TOKEN_ENV) or None
        if token_file:
            try:
                token = Path(token_file).read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise AgentError(f"cannot read --probes-token-file {token_file}: {exc}") from None
            if not token:
                raise AgentError(f"--probes-token-file {token_file} is empty")
        return cls(f"{parsed.scheme}://{host}:{port}", token)


@dataclass(frozen=True, slots=True)
class SampleSource:
    """Where a sample came from (logged with it as "source").

    kind: "agent". url / machine: the agent and the name of the machine it runs on.
    clock_offset_ns / clock_uncertainty_ns: agent clock − ours and its error bound.
    received_ns: our perf_counter_ns when it arrived (its age on arrival: received − t_ns).
    engine_check: why the agent could not read the engine's /api/ps (None: it could).
    cmdlines: command lines of the busiest apps, only from an agent run with --share-cmdlines.
    """

    kind: str
    url: str
    machine: str
    clock_offset_ns: int
    clock_uncertainty_ns: int
    received_ns: int
    engine_check: str | None = None
    cmdlines: dict[str, list[str]] | None = None


@dataclass(frozen=True, slots=True)
class RemoteSample(ProbeSample):
    """A `ProbeSample` taken on the agent's machine; `t_ns` is on this machine's clock."""

    source: SampleSource | None = None


def remote_sample(
    env: dict[str, Any], url: str, clock: ClockEstimate, thresholds: Thresholds, received_ns: int
) -> RemoteSample:
    """An agent's envelope (wire.py) as a RemoteSample: the stamp mapped with `clock`, the
    verdict re-judged with `thresholds` (the agent's probe errors and /api/ps findings kept).
    Raises pydantic.ValidationError / KeyError for an envelope of the wrong shape."""
    sample = wire.decode_sample(env["sample"])
    engine = env.get("engine") or {}
    found: list[Finding] = list(wire.decode_findings(engine.get("findings")))
    found += [f for f in sample.verdict.findings if f.code == "probe-error"]
    if sample.system is not None and sample.processes is not None:
        found += evaluate(sample.system, sample.processes, thresholds).findings
    source = SampleSource("agent", url, str(env.get("machine", "?")), clock.offset_ns,
                          clock.uncertainty_ns, received_ns, engine.get("reason"),
                          env.get("cmdlines"))
    kept = {f.name: getattr(sample, f.name) for f in fields(ProbeSample)}
    kept.update(t_ns=clock.to_client(sample.t_ns), verdict=Verdict.of(found))
    return RemoteSample(**kept, source=source)


class AgentClient:
    """One HTTP client to the agent (sync; httpx). Every call raises AgentError."""

    def __init__(self, target: AgentTarget, read_timeout_s: float = STALL_S) -> None:
        headers = {"Authorization": f"Bearer {target.token}"} if target.token is not None else {}
        timeout = httpx.Timeout(read_timeout_s, connect=CONNECT_TIMEOUT_S)
        self.url = target.url
        self._http = httpx.Client(base_url=target.url, headers=headers, timeout=timeout,
                                  trust_env=False)

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def get(self, path: str) -> dict[str, Any]:
        """GET a JSON route."""
        try:
            response = self._http.get(path)
            self._check(response)
            body: dict[str, Any] = response.json()
            return body
        except (httpx.HTTPError, ValueError) as exc:
            raise AgentError(f"the agent at {self.url} did not answer {path}: {exc}") from None

    def _check(self, response: httpx.Response) -> None:
        if response.status_code == 401:
            raise AgentError(f"the agent at {self.url} refused the token (401): pass its token "
                             f"with --probes-token-file or ${wire.TOKEN_ENV}", refused=True)
        if response.status_code != 200:
            raise AgentError(f"the agent at {self.url} answered HTTP {response.status_code}")

    def clock(self, exchanges: int = CLOCK_EXCHANGES) -> ClockEstimate:
        """Estimate the agent's clock offset from `exchanges` round trips."""
        stamps = []
        for _ in range(exchanges):
            sent = time.perf_counter_ns()
            agent = int(self.get(wire.PATH_CLOCK)["agent_ns"])
            stamps.append((sent, agent, time.perf_counter_ns()))
        return estimate_offset(stamps)

    def lines(self) -> Iterator[dict[str, Any]]:
        """The stream's lines as JSON objects, until it ends (then AgentError)."""
        try:
            with self._http.stream("GET", wire.PATH_STREAM) as response:
                self._check(response)
                for line in response.iter_lines():
                    if line.strip():
                        yield json.loads(line)
        except (httpx.HTTPError, ValueError) as exc:
            raise AgentError(f"the agent's stream at {self.url} broke: {exc}") from None
        raise AgentError(f"the agent at {self.url} ended its stream")


class AgentSampler(SamplerState):
    """`ProbeSampler`'s interface over an agent's stream (module docstring).

    on_sample(sample) is called from the reading thread with each RemoteSample, at most one
    per `interval_s` (the agent samples at its own rate; extra samples are dropped).
    thresholds: this llmtop's verdict thresholds. on_state(state, detail): "connected",
    "lost" or "refused" (bad token), from the same thread. Never raises out of the thread.
    """

    THREAD_NAME = "llmtop-agent"

    def __init__(
        self,
        target: AgentTarget,
        interval_s: float = 1.0,
        on_sample: Callable[[ProbeSample], None] | None = None,
        *,
        thresholds: Thresholds | None = None,
        on_state: Callable[[str, str], None] | None = None,
    ) -> None:
        self.target = target
        self._interval = _positive(interval_s)
        self._on_sample = on_sample
        self._on_state = on_state or (lambda _state, _detail: None)
        self._thresholds = thresholds or DEFAULT
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._latest: ProbeSample | None = None
        self._forwarded_ns = 0
        self.clock: ClockEstimate | None = None
        self.info: dict[str, Any] | None = None  # the agent's PATH_INFO answer
        self.state = "starting"

    @property
    def machine(self) -> str | None:
        """The agent's machine name, once it answered."""
        return None if self.info is None else str(self.info.get("machine"))

    def age_s(self, now_ns: int | None = None) -> float | None:
        """Seconds since the latest sample was taken (our clock), None before the first."""
        if self._latest is None:
            return None
        return ((now_ns or time.perf_counter_ns()) - self._latest.t_ns) / 1e9

    def set_interval(self, interval_s: float) -> None:
        """Hand on at most one sample per `interval_s` (> 0, else ValueError)."""
        self._interval = _positive(interval_s)

    def sample_once(self) -> RemoteSample:
        """One sample taken by the agent for this call (its one-shot route); no callback.
        Raises AgentError when the agent cannot give one."""
        client = AgentClient(self.target)
        try:
            if self.clock is None:
                self.info = client.get(wire.PATH_INFO)
                self.clock = client.clock()
            env = client.get(wire.PATH_SAMPLE)
            sample = self._decode(env)
        finally:
            client.close()
        self._latest = sample
        return sample

    def _decode(self, env: dict[str, Any]) -> RemoteSample:
        assert self.clock is not None
        try:
            return remote_sample(env, self.target.url, self.clock, self._thresholds,
                                 time.perf_counter_ns())
        except (ValueError, KeyError, TypeError) as exc:  # pydantic's ValidationError is one
            raise AgentError(f"the agent at {self.target.url} sent a sample that cannot be "
                             f"read ({type(exc).__name__}); are both llmtop versions the same?"
                             ) from None

    def _run(self) -> None:
        while not self._stop.is_set():
            client = AgentClient(self.target)
            try:
                self._follow(client)
            except AgentError as exc:
                self._set_state("refused" if exc.refused else "lost", str(exc))
            except Exception as exc:  # the thread must keep trying
                log.exception("agent stream failed")
                self._set_state("lost", f"{type(exc).__name__}: {exc}")
            finally:
                client.close()
            self._stop.wait(RETRY_S * (5 if self.state == "refused" else 1))

    def _follow(self, client: AgentClient) -> None:
        self.info = client.get(wire.PATH_INFO)
        self.clock = client.clock()
        clocked_ns = time.perf_counter_ns()
        self._set_state("connected", f"{self.target.url} ({self.machine})")
        for env in client.lines():
            if self._stop.is_set():
                return
            if env.get("type") == "sample":
                self._deliver(self._decode(env))
            if (time.perf_counter_ns() - clocked_ns) / 1e9 > CLOCK_REFRESH_S:
                self.clock, clocked_ns = client.clock(), time.perf_counter_ns()

    def _deliver(self, sample: RemoteSample) -> None:
        self._latest = sample
        if sample.t_ns - self._forwarded_ns < self._interval * 0.9e9:
            return  # 0.9: the agent's period jitters; a 1 s interval must not drop every other
        self._forwarded_ns = sample.t_ns
        if self._on_sample is not None:
            try:
                self._on_sample(sample)
            except Exception:  # the callback's error must not stop the stream
                log.exception("agent sample callback failed")

    def _set_state(self, state: str, detail: str) -> None:
        changed = state != self.state
        self.state = state
        if changed:
            try:
                self._on_state(state, detail)
            except Exception:
                log.exception("agent state callback failed")


def _positive(interval_s: float) -> float:
    if not interval_s > 0:
        raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
    return float(interval_s)


def make_sampler(
    agent: AgentTarget | None,
    interval_s: float,
    on_sample: Callable[[ProbeSample], None] | None,
    engine_pids: PidSource | None = None,
    thresholds: Thresholds | None = None,
    on_state: Callable[[str, str], None] | None = None,
    energy: EnergyReader | None = None,
    engine_threads: Callable[[], int | None] | None = None,
    thread_setting: Callable[[], str | None] | None = None,
) -> ProbeSampler | AgentSampler:
    """The sampler a TUI session or a run uses: the agent's (`--probes`) when `agent` is
    given, else this machine's `ProbeSampler` (engine_pids: the measured engine's local pids;
    energy: this machine's energy reader, sampled with the probes; an agent's machine is not
    read; thread_setting: how a remedy gives this engine N threads,
    `Connection.thread_setting`)."""
    if agent is not None:
        return AgentSampler(agent, interval_s, on_sample, thresholds=thresholds, on_state=on_state)
    return ProbeSampler(interval_s, on_sample, engine_pids=engine_pids, thresholds=thresholds,
                        energy=energy, engine_threads=engine_threads,
                        thread_setting=thread_setting)


def probes_note(agent: AgentTarget | None, engine_host: str) -> str | None:
    """A line for headless output saying which machine the probes watch when it matters:
    the agent's (`--probes`), or this one when the engine at `engine_host` is elsewhere;
    None when both are this machine."""
    if agent is not None:
        return f"probes: the engine's machine, through the agent at {agent.url}"
    if is_local_host(engine_host):
        return None
    return (f"probes: this machine ({socket.gethostname()}), not the engine's ({engine_host}); "
            "run `llmtop agent` there and pass --probes to watch it")
