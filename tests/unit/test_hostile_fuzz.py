"""A seeded batch of malformed requests against both servers over real sockets, then a normal
request, which must still succeed in about its usual time (docs/hostile-input.md, "Fuzz").

The engine runs with the counting test double of test_hostile_engine (its validation, queue
and HTTP layer are real); the relay runs in front of the scripted upstream.
"""

from __future__ import annotations

import json
import random
from time import perf_counter

import httpx
import pytest
from test_hostile_engine import CountingBackend, engine_with

from llmtop.servers.embedded.app import create_app as engine_app
from llmtop.servers.relay.server import create_app as relay_app
from llmtop.testing.scripted import ScriptedUpstream, ServeInThread

SEED = 20261130
REQUESTS = 150
WEIRD_VALUES = [None, True, -1, 0, 2**64, 1e308, -1e-308, "", "\u202e", "x" * 5000, [], {},
                [[[]]], {"a": {"b": {}}}, "5m", "-1", "NaN"]
FIELDS = ["model", "messages", "prompt", "options", "stream", "keep_alive", "think", "format",
          "images", "system", "raw", "host"]
OPTIONS = ["num_ctx", "num_thread", "seed", "temperature", "top_k", "num_predict", "stop", "top_p"]


def weird(rng: random.Random):
    return rng.choice(WEIRD_VALUES)


def malformed(rng: random.Random, model: str) -> tuple[bytes, dict[str, str]]:
    """One malformed request: (body, extra headers)."""
    kind = rng.randrange(8)
    if kind == 0:  # random bytes
        return rng.randbytes(rng.randrange(1, 300)), {}
    if kind == 1:  # a valid request cut short
        text = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
        return text[: rng.randrange(1, len(text))].encode(), {}
    if kind == 2:  # nested far too deep
        depth = rng.randrange(33, 5000)
        return b"[" * depth + b"]" * depth, {}
    if kind == 3:  # JavaScript's numbers and escapes that are not text
        token = rng.choice(
            [b"NaN", b"Infinity", b"-Infinity", b"1e999", b'"\\ud800"', b'"\\udfff"']
        )
        return b'{"model": "%s", "prompt": "x", "options": {"seed": %s}}' % (
            model.encode(),
            token,
        ), {}
    if kind == 4:  # wrong types everywhere
        body = {f: weird(rng) for f in rng.sample(FIELDS, rng.randrange(1, 5))}
        return json.dumps(body).encode(), {}
    if kind == 5:  # options out of range or of the wrong type
        options = {o: weird(rng) for o in rng.sample(OPTIONS, rng.randrange(1, 4))}
        options["num_thread"] = rng.choice([10**6, 4096, 2**40])
        return json.dumps({"model": model, "prompt": "x", "options": options}).encode(), {}
    if kind == 6:  # from a hostile page
        header = rng.choice([{"Origin": "https://evil.example"}, {"Origin": "null"}])
        return json.dumps({"model": model, "prompt": "x"}).encode(), header
    return b"{" * rng.randrange(1, 10) + b'"' * rng.randrange(0, 3), {}


def fire(url: str, path: str, model: str) -> list[int]:
    """Send the seeded batch; return the statuses."""
    rng = random.Random(SEED)
    statuses = []
    with httpx.Client(base_url=url, timeout=10) as c:
        for _ in range(REQUESTS):
            body, headers = malformed(rng, model)
            r = c.post(path, content=body, headers={"Content-Type": "application/json", **headers})
            statuses.append(r.status_code)
    return statuses


def events(r: httpx.Response) -> list[str]:
    """The SSE event names of a relay reply, in order."""
    return [
        line.removeprefix("event: ") for line in r.text.splitlines() if line.startswith("event: ")
    ]


def timed(fn) -> tuple[float, object]:
    t0 = perf_counter()
    result = fn()
    return perf_counter() - t0, result


@pytest.mark.parametrize("server", ["engine", "relay"])
def test_malformed_batch_then_a_normal_request(server):
    with ScriptedUpstream() as upstream:
        if server == "engine":
            app, path, model = engine_app(engine_with(CountingBackend())), "/api/chat", "m:1"
        else:
            app, path, model = relay_app(upstream.url), "/api/stream", "ok"
        with ServeInThread(app) as url:
            normal = {"model": model, "messages": [{"role": "user", "content": "hi"}],
                      "stream": False} if server == "engine" else \
                     {"model": model, "messages": [{"role": "user", "content": "hi"}]}

            def ask() -> httpx.Response:
                return httpx.post(url + path, json=normal, timeout=30)

            before, first = timed(ask)
            statuses = fire(url, path, model)
            after, last = timed(ask)
    assert first.status_code == last.status_code == 200
    if server == "relay":  # the scripted "ok" reply: three tokens, then done
        assert events(last) == events(first) == ["token"] * 3 + ["done"]
    else:
        assert last.json()["message"] == {"role": "assistant", "content": "xxx"}
    assert set(statuses) <= {400, 403, 404, 413}, sorted(set(statuses))  # never a 5xx
    assert statuses.count(403) > 0 and statuses.count(400) > REQUESTS // 2
    # "Its usual time": the same request before the batch, with room for a busy 2-core box.
    assert after < 10 * before + 1.0, (before, after)
