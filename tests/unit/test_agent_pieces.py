"""`llmtop agent`'s pieces without processes: the clock offset arithmetic, the token gate,
the agent's start checks, `--probes` parsing, and an envelope read back as a RemoteSample.
The agent and its client as separate processes: tests/integration/test_agent.py."""

from __future__ import annotations

import argparse
import json

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from llmtop.commands.agent import check
from llmtop.commands.tokens import MIN_TOKEN_CHARS, is_loopback, read_token
from llmtop.probes import wire
from llmtop.probes.agent_clock import ClockEstimate, estimate_offset
from llmtop.probes.catalogue import Category
from llmtop.probes.processes import AppUsage, ProcessSample
from llmtop.probes.remote import AgentError, AgentTarget, probes_note, remote_sample
from llmtop.probes.sampler import ProbeSample
from llmtop.probes.system import SystemSample
from llmtop.probes.verdict import DEFAULT, Finding, Level, Thresholds, Verdict
from llmtop.servers.agent.server import TokenGate
from llmtop.sessions.records.schema import ProbeRecord

TOKEN = "0123456789abcdef0123456789abcdef"


# ------------------------------------------------------------------------ clock


def test_offset_comes_from_the_shortest_round_trip() -> None:
    # (sent, agent, received): the second exchange has the shortest round trip (4 ns), so
    # offset = 1010 - (1000 + 1004) / 2 = 8 and its bound is 4 / 2 = 2, by hand.
    est = estimate_offset([(0, 100, 50), (1000, 1010, 1004), (2000, 2020, 2010)])
    assert est == ClockEstimate(offset_ns=8, uncertainty_ns=2, rtt_ns=4, exchanges=3)
    assert est.to_client(1010) == 1002  # the agent's stamp lands mid-way on our clock


def test_an_odd_round_trip_rounds_the_bound_up() -> None:
    est = estimate_offset([(10, 5_000_000_020, 13)])
    # midpoint 11.5 floored to 11 → offset 5_000_000_009; half of 3 ns rounded up is 2
    assert (est.offset_ns, est.uncertainty_ns) == (5_000_000_009, 2)


def test_no_exchange_or_a_reversed_one_is_an_error() -> None:
    with pytest.raises(ValueError, match="no clock exchange"):
        estimate_offset([])
    with pytest.raises(ValueError, match="before it was sent"):
        estimate_offset([(10, 0, 9)])


# ------------------------------------------------------------------------ token gate


def _gated(token: str | None) -> httpx.AsyncClient:
    async def hello(_request: object) -> JSONResponse:
        return JSONResponse({"machine": "secret-box"})

    app = TokenGate(Starlette(routes=[Route("/v1/info", hello)]), token)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://agent")


@pytest.mark.parametrize("header", [
    None,  # missing
    "",  # empty
    "Bearer ",  # an empty token
    f"Bearer {TOKEN[:-1]}x",  # wrong in the last character only
    f"bearer {TOKEN}",  # the scheme is case-sensitive here: only what we sent is accepted
    TOKEN,  # no scheme
    f"Bearer {TOKEN}{'a' * 60_000}",  # very long, starting with the right token
])
async def test_a_bad_or_missing_token_gets_a_bare_401(header: str | None) -> None:
    client = _gated(TOKEN)
    headers = {} if header is None else {"Authorization": header}
    for path in ("/v1/info", "/nowhere"):  # an unknown path discloses nothing either
        response = await client.get(path, headers=headers)
        assert response.status_code == 401
        assert response.content == b""
        assert "secret-box" not in response.text


async def test_the_right_token_is_accepted_and_no_token_means_no_check() -> None:
    ok = await _gated(TOKEN).get("/v1/info", headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200 and ok.json() == {"machine": "secret-box"}
    assert (await _gated(None).get("/v1/info")).status_code == 200


# ------------------------------------------------------------------------ start checks


def _args(host: str, token_file: str | None) -> argparse.Namespace:
    return argparse.Namespace(host=host, port=1, token_file=token_file, interval=0.5)


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("0.0.0.0", False), ("::", False), ("192.168.1.5", False),
    ("gpu-box", False),
])
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_off_loopback_without_a_token_is_refused(tmp_path) -> None:
    token, why = check(_args("0.0.0.0", None))
    assert token is None and "refusing to listen on 0.0.0.0 without --token-file" in why
    still = argparse.Namespace(**{**vars(_args("127.0.0.1", None)), "interval": 0.0})
    assert check(still) == (None, "--interval must be > 0 seconds, got 0.0")


def test_headless_output_says_which_machine_the_probes_watch() -> None:
    assert probes_note(None, "http://127.0.0.1:11434") is None
    note = probes_note(None, "http://gpu-box:11434")
    assert note is not None and "not the engine's (http://gpu-box:11434)" in note
    assert probes_note(AgentTarget("http://gpu-box:11500"), "http://gpu-box:11434") == (
        "probes: the engine's machine, through the agent at http://gpu-box:11500")


@pytest.mark.parametrize("content", ["", "   \n", "short", "é" * MIN_TOKEN_CHARS])
def test_a_token_file_that_cannot_serve_is_refused(tmp_path, content: str) -> None:
    path = tmp_path / "token"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match="at least 16 printable ASCII"):
        read_token(str(path))
    with pytest.raises(ValueError, match="cannot read --token-file"):
        read_token(str(tmp_path / "missing"))


def test_a_token_file_is_read_without_its_newline(tmp_path) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    assert read_token(str(path)) == TOKEN


# ------------------------------------------------------------------------ --probes


@pytest.mark.parametrize(("given", "url"), [
    ("gpu-box", "http://gpu-box:11500"),
    ("http://gpu-box:9000", "http://gpu-box:9000"),
    ("https://10.0.0.2/", "https://10.0.0.2:11500"),  # the agent's port, not 443
    ("[::1]:7", "http://[::1]:7"),
])
def test_probes_addresses(given: str, url: str, monkeypatch) -> None:
    monkeypatch.delenv(wire.TOKEN_ENV, raising=False)
    assert AgentTarget.from_flags(given) == AgentTarget(url, None)


def test_probes_token_from_a_file_or_the_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(wire.TOKEN_ENV, "from-env")
    assert AgentTarget.from_flags("h").token == "from-env"
    (tmp_path / "t").write_text(" from-file\n")
    assert AgentTarget.from_flags("h", str(tmp_path / "t")).token == "from-file"
    with pytest.raises(AgentError, match="cannot read --probes-token-file"):
        AgentTarget.from_flags("h", str(tmp_path / "none"))
    with pytest.raises(AgentError, match="give http://HOST"):
        AgentTarget.from_flags("http://h:1/api")


# ------------------------------------------------------------------------ envelopes


def _agent_sample() -> ProbeSample:
    system = SystemSample(50.0, (50.0, 50.0), 0.5, 8 << 30, 4 << 30, 50.0, 0, 0, 0.0, None,
                          None, None, logical_cpus=2)
    burner = AppUsage("burner", Category.OTHER, 30.0, 1 << 20, 1, (42,), False, 15.0)
    procs = ProcessSample((burner,), 1.0, None, False, 100, 2)
    error = Finding("probe-error", Level.WARN, None, None, "", "gpu probe failed: X", "r")
    stale = Finding("app-busy", Level.WARN, 30.0, 10.0, "% CPU", "judged by the agent", "r")
    return ProbeSample(5_000_000_000, "t", system, procs, None, Verdict.of([error, stale]), 1.5)


def test_an_envelope_reads_back_on_our_clock_and_our_thresholds() -> None:
    sample = _agent_sample()
    engine = {"findings": [{"code": "model-loaded", "level": "info", "value": None,
                            "threshold": None, "unit": "", "message": "m", "remedy": "r"}],
              "reason": None}
    env = wire.envelope(sample, 9, "gpu-box", engine, None, clock_offset_ns=1_000)
    env = json.loads(wire.encode_line(env))  # through the wire, as the client reads it
    assert env["sample"]["t_ns"] == 5_000_001_000  # the injected offset is on the stamp
    clock = ClockEstimate(offset_ns=1_000 + 4_000_000_000, uncertainty_ns=7, rtt_ns=14,
                          exchanges=8)
    strict = Thresholds(app_cpu_warn=20.0, app_cpu_fail=25.0)
    got = remote_sample(env, "http://gpu-box:11500", clock, strict, received_ns=77)
    assert got.t_ns == 1_000_000_000  # 5_000_001_000 − 4_000_001_000
    assert got.processes == sample.processes and got.system == sample.system
    codes = [(f.code, f.level) for f in got.verdict.findings]
    # re-judged here: 30 % ≥ app_cpu_fail 25 → FAIL; the agent's WARN is gone, its probe
    # error and /api/ps finding are kept
    assert ("app-busy", Level.FAIL) in codes and ("app-busy", Level.WARN) not in codes
    assert ("probe-error", Level.WARN) in codes and ("model-loaded", Level.INFO) in codes
    assert got.source is not None
    assert (got.source.machine, got.source.clock_offset_ns, got.source.clock_uncertainty_ns,
            got.source.received_ns) == ("gpu-box", 4_000_001_000, 7, 77)
    again = remote_sample(env, "u", clock, DEFAULT, 0)
    assert ("app-busy", Level.WARN) in [(f.code, f.level) for f in again.verdict.findings]


def test_a_remote_sample_is_logged_with_its_source() -> None:
    env = json.loads(wire.encode_line(wire.envelope(_agent_sample(), 0, "gpu-box",
                                                    {"findings": None, "reason": "down"})))
    clock = ClockEstimate(0, 1, 2, 1)
    record = remote_sample(env, "http://g:1", clock, DEFAULT, 5).to_dict()
    read = ProbeRecord.from_json({"type": "probe", "request_id": 3, **record})
    assert read.source is not None
    assert (read.source.kind, read.source.machine, read.source.url) == ("agent", "gpu-box",
                                                                         "http://g:1")
    assert record["source"]["engine_check"] == "down"
    assert ProbeRecord.from_json({"type": "probe"}).source is None  # an older log


def test_a_bad_probes_address_is_refused_before_anything_starts(capsys) -> None:
    from llmtop.cli import main

    assert main(["run", "--prompt", "x", "--probes", "http://h:1/api"]) == 2
    assert "give http://HOST[:PORT] of `llmtop agent`" in capsys.readouterr().err
    assert main(["preflight", "--probes", "h", "--probes-token-file", "/nonexistent"]) == 2
    assert "cannot read --probes-token-file /nonexistent" in capsys.readouterr().err


async def test_a_bench_preflight_without_its_agent_is_recorded_not_raised() -> None:
    from llmtop.engines.connection import Connection
    from llmtop.engines.ollama import OllamaEngine
    from llmtop.servers.child import free_port
    from llmtop.sessions.runners.environment import preflight_record

    engine = OllamaEngine("http://127.0.0.1:1")
    conn = Connection(engine=engine, model="m", info=None, version=None)
    nobody = AgentTarget(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    try:
        record = await preflight_record(conn, 1.0, nobody)
    finally:
        await engine.aclose()
    assert (record.verdict, record.quiet) == ("CANNOT CHECK", False)
    assert record.findings[0].code == "probe-error"
    assert record.error is not None and nobody.url in record.error
