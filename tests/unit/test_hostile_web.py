"""Cross-site and DNS-rebinding requests against both servers, and the relay's refusals
(docs/hostile-input.md). The apps run in-process (httpx ASGITransport): the Host and Origin
headers are set by the test exactly as a browser on a hostile page would send them."""

from __future__ import annotations

import os

import httpx
import pytest

from llmtop.servers.embedded.app import EmbeddedEngine
from llmtop.servers.embedded.app import create_app as engine_app
from llmtop.servers.embedded.model_files import ModelDescription
from llmtop.servers.guard import Guard, origin_pattern
from llmtop.servers.relay.request import parse_stream_request
from llmtop.servers.relay.server import create_app as relay_app

DESC = ModelDescription(name="m:1", path="/nonexistent.gguf", size=1, digest="d", modified_at="t",
                        family="f", parameter_count=1, parameter_size="1", quantization_level="Q",
                        context_length=512)


def apps(guard: Guard | None = None):
    """Both servers' apps behind the same guard (the engine's model is never loaded here)."""
    return {"engine": engine_app(EmbeddedEngine(DESC), guard),
            "relay": relay_app("http://127.0.0.1:9", guard=guard)}


async def send(app, method: str, path: str, host: str = "127.0.0.1:8000", **kw) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url=f"http://{host}") as c:
        return await c.request(method, path, **kw)


# ------------------------------------------------------------------ the policy as a table

@pytest.mark.parametrize("bind, host, allowed", [
    ("127.0.0.1", "127.0.0.1:11434", True),
    ("127.0.0.1", "localhost:8000", True),
    ("127.0.0.1", "LOCALHOST.", True),
    ("127.0.0.1", "app.localhost:8000", True),
    ("127.0.0.1", "[::1]:8000", True),
    ("127.0.0.1", "127.8.9.10", True),  # all of 127/8 is loopback
    ("127.0.0.1", "", True),  # HTTP/1.0 without Host
    ("127.0.0.1", "attacker.example:8000", False),  # DNS rebinding: the page's own name
    ("127.0.0.1", "localhost.attacker.example", False),
    ("127.0.0.1", "192.168.1.5:8000", False),
    ("192.168.1.5", "192.168.1.5:8000", True),  # the configured bind address
    ("192.168.1.5", "10.0.0.1", False),
    ("0.0.0.0", "attacker.example", True),  # bound to every interface on purpose (as Ollama)
    ("127.0.0.1", "127.0.0.1:80:81", False),  # two ports: no host at all (was a 500)
    ("127.0.0.1", "[127.0.0.1:80]:81", False),
    ("127.0.0.1", "127.0.0.1:11435@evil.example", False),  # what follows the name is checked
    ("127.0.0.1", "[::1]evil", False),
    ("127.0.0.1", "localhost:11435/evil", False),
    ("127.0.0.1", "localhost:" + "1" * 100, False),
    ("127.0.0.1", "localhost:65536", False),
    ("127.0.0.1", "localhost:65535", True),
    ("::1", "attacker.example", False),  # a bare IPv6 bind address is one address, not all
    ("::1", "[::1]:8000", True),
])
def test_host_policy(bind, host, allowed):
    assert Guard.from_env(bind, {}).host_allowed(host) is allowed


@pytest.mark.parametrize("origin, env, allowed", [
    ("http://127.0.0.1:8000", "", True),
    ("http://localhost", "", True),
    ("https://localhost:3000", "", True),
    ("http://[::1]:8000", "", True),
    ("https://evil.example", "", False),
    ("http://localhost.evil.example", "", False),
    ("http://127.0.0.1.evil.example", "", False),
    ("null", "", False),  # sandboxed iframes, file:// pages
    ("https://app.example", "https://app.example", True),
    ("https://a.example.com", "https://*.example.com", True),
    ("https://evil.com/x.example.com", "https://*.example.com", False),  # * never spans "/"
    ("https://b.other.com", "https://*.example.com, https://x.other.com", False),
])
def test_origin_policy(origin, env, allowed):
    assert Guard.from_env("127.0.0.1", {"LLMTOP_ORIGINS": env}).origin_allowed(origin) is allowed


def test_origin_pattern_is_literal_but_for_the_star():
    assert origin_pattern("http://a.b:*") == r"(?i:http://a\.b:[^/]*)"


def test_bad_body_limit_setting_names_the_variable():
    with pytest.raises(ValueError, match="LLMTOP_MAX_BODY_BYTES='lots'"):
        Guard.from_env("127.0.0.1", {"LLMTOP_MAX_BODY_BYTES": "lots"})


# ------------------------------------------------------------------ both servers, over HTTP

SERVERS = ["engine", "relay"]
STREAM = {"engine": "/api/chat", "relay": "/api/stream"}
BODY = {"model": "m:1", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("server", SERVERS)
async def test_rebinding_host_is_403(server):
    r = await send(apps()[server], "GET", "/", host="attacker.example:8000")
    assert r.status_code == 403
    assert r.json()["error"].startswith("Host 'attacker.example:8000' is not allowed")


@pytest.mark.parametrize("server", SERVERS)
async def test_a_host_with_two_ports_is_403_not_500(server):
    r = await send(apps()[server], "GET", "/", headers={"Host": "127.0.0.1:80:81"})
    assert r.status_code == 403
    assert r.json()["error"].startswith("Host '127.0.0.1:80:81' is not allowed")


@pytest.mark.parametrize("server", SERVERS)
async def test_cross_site_text_plain_post_is_403_before_any_work(server):
    # A page's fetch(url, {method: "POST", body}) with text/plain needs no preflight.
    r = await send(apps()[server], "POST", STREAM[server], content=b'{"model": "m:1"}',
                   headers={"Origin": "https://evil.example", "Content-Type": "text/plain"})
    assert r.status_code == 403
    assert r.json()["error"].startswith("origin 'https://evil.example' is not allowed")
    assert "LLMTOP_ORIGINS" in r.json()["error"]


@pytest.mark.parametrize("server", SERVERS)
async def test_preflight_answered_for_allowed_origins_only(server):
    headers = {"Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "content-type"}
    ok = await send(apps()[server], "OPTIONS", STREAM[server],
                    headers={**headers, "Origin": "http://localhost:5173"})
    assert ok.status_code == 200
    assert ok.headers["access-control-allow-origin"] == "http://localhost:5173"
    assert "POST" in ok.headers["access-control-allow-methods"]
    bad = await send(apps()[server], "OPTIONS", STREAM[server],
                     headers={**headers, "Origin": "https://evil.example"})
    assert bad.status_code == 403 and "access-control-allow-origin" not in bad.headers


@pytest.mark.parametrize("server", SERVERS)
async def test_allowed_origin_gets_cors_headers(server):
    r = await send(apps()[server], "GET", "/", headers={"Origin": "http://127.0.0.1:8000"})
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == "http://127.0.0.1:8000"


@pytest.mark.parametrize("server", SERVERS)
async def test_origins_added_by_the_environment(server):
    guard = Guard.from_env("127.0.0.1", {"LLMTOP_ORIGINS": "https://dash.example"})
    r = await send(apps(guard)[server], "GET", "/", headers={"Origin": "https://dash.example"})
    assert r.status_code == 200


@pytest.mark.parametrize("server", SERVERS)
async def test_body_limit_from_the_environment_is_413(server):
    guard = Guard.from_env("127.0.0.1", {"LLMTOP_MAX_BODY_BYTES": "100"})
    r = await send(apps(guard)[server], "POST", STREAM[server], content=b"{" + b" " * 200 + b"}")
    assert r.status_code == 413 and "the limit is 100 bytes" in r.json()["error"]


# ------------------------------------------------------------------ the relay's refusals

CORES = os.cpu_count() or 1
RELAY_REFUSED = [
    (b'{"model": "m", "prompt": "x", "options": {"temperature": NaN}}', "NaN is not valid JSON"),
    (
        b'{"model": "m", "prompt": "x", "options": {"seed": 1e999}}',
        "options.seed is not a finite number",
    ),
    (b'{"model": "m", "prompt": "\\ud83d"}', "prompt has a lone surrogate ('\\ud83d')"),
    (b"[" * 100_000, "JSON nested deeper than 32 levels"),
    (b'{"model": 42, "prompt": "x"}', "model must be a string, got 42 (a number)"),
    (b'{"model": "m", "prompt": 42}', "prompt must be a string, got 42 (a number)"),
    (b'{"model": "m", "messages": ["hi"]}', "messages[0] must be an object, got 'hi' (a string)"),
    (
        b'{"model": "m", "prompt": "x", "options": {"num_thread": 100000}}',
        "option 'num_thread' is 100000",
    ),
    (
        b'{"model": "m", "prompt": "x", "options": {"seed": 9223372036854775808}}',
        "option 'seed' must be from",
    ),
    (
        b'{"model": "m", "prompt": "x", "options": {"num_ctx": "big"}}',
        "option 'num_ctx' must be an integer, got 'big' (a string)",
    ),
    (b'{"model": "m", "prompt": "x", "keep_alive": 1e300}', "keep_alive 1e+300 is out of range"),
    (
        b'{"model": "m", "prompt": "x", "keep_alive": "forever"}',
        "keep_alive 'forever' is not a duration",
    ),
    (b'{"model": "m", "prompt": "x", "images": ["aGk="]}', "unknown field(s) images"),
]


@pytest.mark.parametrize("body, fragment", RELAY_REFUSED)
async def test_relay_refuses_before_forwarding(body, fragment):
    # The upstream (port 9, discard) is never called: the app's lifespan, which opens the
    # connection pool, does not even run under ASGITransport.
    r = await send(apps()["relay"], "POST", "/api/stream", content=body)
    assert r.status_code == 400 and fragment in r.json()["error"], r.text


def test_relay_accepts_options_at_the_boundaries():
    job = parse_stream_request({"model": "m", "prompt": "x", "keep_alive": "-1m", "options": {
        "num_thread": CORES, "seed": 2**63 - 1, "num_ctx": 16, "temperature": 0}})
    assert b'"num_thread":%d' % CORES in job.payload and job.path == "/api/generate"


def test_the_relay_page_at_its_bind_address_is_allowed():
    guard = Guard.from_env("192.168.1.5", {})  # `llmtop relay --host 192.168.1.5`
    assert guard.origin_allowed("http://192.168.1.5:8000")
    assert not guard.origin_allowed("http://192.168.1.6:8000")
