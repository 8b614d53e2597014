"""The relay server (llmtop/servers/relay/server.py) against a scripted upstream with known replies.

Everything runs over real sockets (uvicorn in threads), because buffering, headers and
disconnects are exactly what a test client that bypasses the network would hide.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from time import perf_counter_ns

import httpx
import pytest
from httpx_sse import EventSource, aconnect_sse

from llmtop.engines.http import BadRequest
from llmtop.servers.child import free_port
from llmtop.servers.relay.request import parse_stream_request
from llmtop.servers.relay.server import choose_default, create_app
from llmtop.testing.scripted import STATS, ScriptedUpstream, ServeInThread, Timing

MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def upstream():
    with ScriptedUpstream(Timing(first_s=0.05, chunks=20, gap_s=0.01)) as server:
        yield server


@pytest.fixture(scope="module")
def relay(upstream):
    with ServeInThread(create_app(upstream.url)) as url:
        yield url


def parse_sse(r: httpx.Response) -> list[tuple[str, dict]]:
    """The response's SSE events as (name, JSON data), parsed by httpx-sse (comment pings,
    which carry no data, are not events)."""
    return [(e.event, e.json()) for e in EventSource(r).iter_sse()]


def strict_blocks(raw: str) -> list[list[str]]:
    """Strict framing check on the raw text: every block but a comment ping is exactly
    `event: NAME` then `data: JSON`, and ends with a blank line. Returns the blocks' lines."""
    assert raw.endswith("\n\n"), raw[-50:]
    blocks = [b.split("\n") for b in raw[:-2].split("\n\n")]
    blocks = [lines for lines in blocks if not all(line.startswith(":") for line in lines)]
    for lines in blocks:
        assert len(lines) == 2, lines
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), lines
    return blocks


def post(relay: str, body: dict, **kw) -> httpx.Response:
    return httpx.post(relay + "/api/stream", json=body, timeout=10, **kw)


# ---------------------------------------------------------------------- request parsing (pure)


def test_parse_chat_request_builds_the_exact_upstream_body():
    job = parse_stream_request(
        {"model": "m", "messages": MSG, "options": {"seed": 42}, "think": False, "keep_alive": "5m"}
    )
    assert job.path == "/api/chat" and job.chat and job.model == "m"
    assert json.loads(job.payload) == {
        "model": "m", "messages": MSG, "stream": True, "options": {"seed": 42}, "think": False,
        "keep_alive": "5m",
    }


def test_unknown_fields_are_refused_by_name():
    with pytest.raises(BadRequest, match=r"unknown field\(s\) num_predict: .*inside \"options\""):
        parse_stream_request({"model": "m", "prompt": "hi", "num_predict": 5})
    with pytest.raises(BadRequest, match="unknown field\\(s\\) extra"):
        parse_stream_request({"model": "m", "prompt": "hi", "extra": 1})


def test_parse_prompt_request_goes_to_generate():
    job = parse_stream_request({"model": "m", "prompt": "hello"})
    assert job.path == "/api/generate" and not job.chat
    assert json.loads(job.payload) == {"model": "m", "prompt": "hello", "stream": True}


@pytest.mark.parametrize(
    "body, fragment",
    [
        ([], "JSON object"),
        ({"prompt": "x"}, "model is required"),
        ({"model": "m"}, "exactly one"),
        ({"model": "m", "prompt": "x", "messages": MSG}, "exactly one"),
        ({"model": "m", "messages": "hi"}, "list of objects"),
        ({"model": "m", "prompt": "x", "options": [1]}, "options must be"),
        ({"model": "m", "prompt": "x", "think": "very"}, "think must be"),
        ({"model": "m", "prompt": "x", "host": "http://evil:11434"}, "upstream is fixed"),
        ({"model": "m", "prompt": "x", "upstream": "http://evil:11434"}, "upstream is fixed"),
    ],
)
def test_parse_rejects_bad_requests(body, fragment):
    with pytest.raises(BadRequest, match=re.escape(fragment)):
        parse_stream_request(body)


def test_default_model_prefers_gemma3_270m():
    assert choose_default(["a", "gemma3:270m"]) == "gemma3:270m"
    assert choose_default(["a", "b"]) == "a"
    assert choose_default([]) is None


# ---------------------------------------------------------------------- framing and headers


def test_events_are_framed_one_token_per_chunk_then_done(relay):
    r = post(relay, {"model": "ok", "messages": MSG})
    assert r.status_code == 200
    events = parse_sse(r)
    assert [name for name, _ in events] == ["token", "token", "token", "done"]
    assert [lines[0] for lines in strict_blocks(r.text)] == [f"event: {n}" for n, _ in events]
    assert [d["content"] for _, d in events[:3]] == ["Hel", "lo", "!"]
    for _, d in events[:3]:
        assert set(d) == {"content", "thinking", "relay_recv_ns", "relay_offset_ms"}
        assert d["thinking"] == ""
    stamps = [d["relay_recv_ns"] for _, d in events]
    offsets = [d["relay_offset_ms"] for _, d in events]
    assert stamps == sorted(stamps) and offsets == sorted(offsets) and offsets[0] > 0


def test_stream_headers_keep_it_streaming_even_when_gzip_is_offered(relay):
    r = post(
        relay, {"model": "ok", "messages": MSG}, headers={"Accept-Encoding": "gzip, deflate, br"}
    )
    assert r.headers["content-type"].startswith("text/event-stream")
    assert "no-cache" in r.headers["cache-control"]
    assert r.headers["x-accel-buffering"] == "no"
    assert "content-encoding" not in r.headers
    assert "content-length" not in r.headers  # chunked: written as it goes


def test_done_event_carries_upstream_stats_unchanged_plus_relay_timings(relay):
    events = parse_sse(post(relay, {"model": "ok", "messages": MSG}))
    name, done = events[-1]
    assert name == "done"
    for key, value in STATS.items():
        assert done[key] == value and type(done[key]) is int
    assert done["done_reason"] == "stop" and done["done"] is True
    assert done["model"] == "m" and done["created_at"] == "2026-01-01T00:00:00Z"
    assert "message" not in done and done["content"] == "" and done["relay_chunks"] == 3
    assert (
        0 <= done["relay_parse_ms"] <= done["upstream_headers_ms"] <= done["relay_first_chunk_ms"]
    )
    assert done["relay_first_chunk_ms"] == done["relay_ttft_ms"] <= done["relay_request_ms"]
    assert done["upstream_connection"] in ("new", "reused")
    assert done["upstream"].startswith("http://127.0.0.1:")


def test_sparse_stats_stay_absent(relay):
    done = parse_sse(post(relay, {"model": "sparse", "messages": MSG}))[-1][1]
    assert "load_duration" not in done and "prompt_eval_count" not in done
    assert done["eval_count"] == 2


def test_the_upstream_connection_is_reused_between_requests(relay):
    post(relay, {"model": "ok", "messages": MSG})
    done = parse_sse(post(relay, {"model": "ok", "messages": MSG}))[-1][1]
    assert done["upstream_connection"] == "reused" and done["upstream_connect_ms"] is None


def test_thinking_text_is_relayed_apart_from_content(relay):
    events = parse_sse(post(relay, {"model": "thinking", "messages": MSG}))
    assert [(d["content"], d["thinking"]) for n, d in events if n == "token"] == [
        ("", "Let me"), ("", " think"), ("Yes", "")]


def test_prompt_goes_to_generate_with_options(relay, upstream):
    upstream.recorder.reset()
    events = parse_sse(
        post(relay, {"model": "ok", "prompt": "hello", "options": {"num_predict": 5}})
    )
    assert "".join(d["content"] for n, d in events if n == "token") == "Hello!"
    path, body = upstream.recorder.requests[-1]
    assert path == "/api/generate"
    assert body == {"model": "ok", "prompt": "hello", "stream": True, "options": {"num_predict": 5}}


async def test_events_arrive_as_they_happen_not_buffered(relay):
    # timed: first chunk after 50 ms, then 19 more 10 ms apart (≈ 240 ms in all)
    arrivals: list[tuple[int, str]] = []
    body = {"model": "timed", "messages": MSG}
    async with (
        httpx.AsyncClient(timeout=10) as client,
        aconnect_sse(client, "POST", relay + "/api/stream", json=body) as source,
    ):
        async for event in source.aiter_sse():
            arrivals.append((perf_counter_ns(), event.event))
    names = [n for _, n in arrivals]
    assert names == ["token"] * 20 + ["done"]
    first, done = arrivals[0][0], arrivals[-1][0]
    assert (done - first) / 1e6 > 150, "events were held back and delivered together"
    gaps = [(b[0] - a[0]) / 1e6 for a, b in itertools.pairwise(arrivals[:-1])]
    assert sorted(gaps)[len(gaps) // 2] > 5


# ---------------------------------------------------------------------- errors


def test_unreachable_upstream_is_an_error_event_naming_it():
    dead = f"http://127.0.0.1:{free_port()}"
    with ServeInThread(create_app(dead, connect_timeout_s=2)) as relay:
        r = post(relay, {"model": "ok", "messages": MSG})
    assert r.status_code == 200
    events = parse_sse(r)
    assert [n for n, _ in events] == ["error"]
    err = events[0][1]
    assert err["kind"] == "unreachable" and dead in err["message"] and err["upstream"] == dead
    assert "--upstream" in err["remedy"]


def test_unknown_model_is_an_error_event_with_the_upstreams_404_message(relay):
    events = parse_sse(post(relay, {"model": "nope", "messages": MSG}))
    assert [n for n, _ in events] == ["error"]
    err = events[0][1]
    assert err["kind"] == "model-not-found" and err["status"] == 404
    assert err["error"] == "model 'nope' not found"
    assert "model 'nope' not found" in err["message"] and "installed: ok" in err["message"]


def test_midstream_error_comes_after_the_tokens_already_relayed(relay):
    events = parse_sse(post(relay, {"model": "midstream-error", "messages": MSG}))
    assert [n for n, _ in events] == ["token", "token", "error"]
    assert "".join(d["content"] for n, d in events[:2]) == "partial"
    err = events[-1][1]
    assert err["kind"] == "server-error" and err["error"] == "model runner has unexpectedly stopped"


def test_stream_without_done_ends_with_a_truncated_error(relay):
    events = parse_sse(post(relay, {"model": "truncated", "messages": MSG}))
    assert [n for n, _ in events] == ["token", "token", "error"]
    assert events[-1][1]["kind"] == "truncated"


def test_a_line_that_is_not_json_is_a_protocol_error(relay):
    events = parse_sse(post(relay, {"model": "garbage", "messages": MSG}))
    assert [n for n, _ in events] == ["token", "error"] and events[-1][1]["kind"] == "protocol"


def test_a_hung_upstream_ends_the_stream_with_a_timeout_error(upstream):
    with ServeInThread(create_app(upstream.url, read_timeout_s=0.5)) as relay:
        t0 = perf_counter_ns()
        events = parse_sse(post(relay, {"model": "hang", "messages": MSG}))
        elapsed_s = (perf_counter_ns() - t0) / 1e9
    assert [n for n, _ in events] == ["token", "error"]
    assert events[-1][1]["kind"] == "timeout" and elapsed_s < 5


@pytest.mark.parametrize(
    "content, fragment",
    [
        (b"not json", "not JSON"),
        (json.dumps({"prompt": "x"}).encode(), "model is required"),
        (
            json.dumps({"model": "ok", "prompt": "x", "host": "http://127.0.0.1:1"}).encode(),
            "fixed",
        ),
    ],
)
def test_bad_requests_get_400_json_and_no_stream(relay, content, fragment):
    r = httpx.post(
        relay + "/api/stream", content=content, headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 400 and fragment in r.json()["error"]


def test_the_body_cannot_redirect_the_upstream(relay, upstream):
    with ScriptedUpstream() as other:
        for key in ("host", "upstream", "url", "base_url"):
            r = post(relay, {"model": "ok", "messages": MSG, key: other.url})
            assert r.status_code == 400
        assert other.recorder.requests == []


# ---------------------------------------------------------------------- disconnects


async def test_client_disconnect_closes_the_upstream_stream_within_a_second():
    with ScriptedUpstream() as upstream, ServeInThread(create_app(upstream.url)) as relay:
        tokens = 0
        async with httpx.AsyncClient(timeout=10) as client:
            async with aconnect_sse(client, "POST", relay + "/api/stream",
                                    json={"model": "slow", "messages": MSG}) as source:
                async for event in source.aiter_sse():
                    if event.event == "token":
                        tokens += 1
                        if tokens == 2:
                            break
            t_closed = perf_counter_ns()  # the response (and its connection) is closed here
        assert await asyncio.to_thread(upstream.recorder.closed.wait, 3.0), (
            "upstream stream never closed"
        )
        assert upstream.recorder.cut_short == [True]  # cancelled, not run to its end (30 s)
        assert (upstream.recorder.closed_ns[0] - t_closed) / 1e9 < 1.0


# ---------------------------------------------------------------------- page and metadata


def test_page_is_one_self_contained_html_document(relay):
    r = httpx.get(relay + "/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    html = r.text
    assert "<script>" in html and "<style>" in html and 'id="send"' in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html), "external resource"
    assert "@import" not in html and "url(" not in html
    assert "default-src 'none'" in r.headers["content-security-policy"]


def test_models_route_lists_the_upstreams_models_with_a_default(relay, upstream):
    j = httpx.get(relay + "/api/models").json()
    assert j["models"] == ["ok", "timed", "thinking", "slow"] and j["default"] == "ok"
    assert j["upstream"] == upstream.url


def test_models_route_says_when_the_upstream_is_down():
    dead = f"http://127.0.0.1:{free_port()}"
    with ServeInThread(create_app(dead)) as relay:
        r = httpx.get(relay + "/api/models")
        assert r.status_code == 502 and dead in r.json()["error"]
        assert httpx.get(relay + "/").status_code == 200  # the page still loads


def test_relay_route_names_the_upstream(relay, upstream):
    assert httpx.get(relay + "/api/relay").json()["upstream"] == upstream.url


async def test_client_leaving_before_the_first_token_closes_the_upstream_too():
    # the upstream would wait 5 s before its first chunk (a long prefill); the client leaves
    # as soon as it has the SSE headers
    with (
        ScriptedUpstream(Timing(first_s=5.0)) as upstream,
        ServeInThread(create_app(upstream.url)) as relay,
    ):
        async with httpx.AsyncClient(timeout=10) as client:
            async with client.stream("POST", relay + "/api/stream",
                                     json={"model": "timed", "messages": MSG}) as r:
                assert r.status_code == 200
                assert await asyncio.to_thread(upstream.recorder.started.wait, 3.0)
            t_closed = perf_counter_ns()
        assert await asyncio.to_thread(upstream.recorder.closed.wait, 3.0), (
            "upstream stream never closed"
        )
        assert upstream.recorder.cut_short == [True]
        assert (upstream.recorder.closed_ns[0] - t_closed) / 1e9 < 1.0


def test_capabilities_route_says_whether_a_model_thinks(relay):
    # the scripted upstream's /api/show lists "thinking" for the model "thinking" only
    yes = httpx.get(relay + "/api/capabilities", params={"model": "thinking"}).json()
    assert yes == {"model": "thinking", "capabilities": ["completion", "thinking"],
                   "thinking": True}
    no = httpx.get(relay + "/api/capabilities", params={"model": "ok"}).json()
    assert no["thinking"] is False
    assert httpx.get(relay + "/api/capabilities").status_code == 400
    # a model the upstream does not know: it cannot say (null), and says why
    missing = httpx.get(relay + "/api/capabilities", params={"model": "nope"})
    assert missing.status_code == 200 and missing.json()["thinking"] is None
    assert "'nope'" in missing.json()["error"]
