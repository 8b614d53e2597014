"""`llmtop watch`'s pass-through (servers/watch/proxy.py) in front of the scripted servers:
real clients (the official `ollama` client, httpx), real sockets, the scripted server's own
stamps as the truth."""

from __future__ import annotations

import threading
from typing import Self

import httpx
import ollama

from llmtop.servers.child import free_port
from llmtop.servers.watch.proxy import WatchProxy
from llmtop.testing.scripted import ScriptedUpstream, Timing
from llmtop.testing.scripted_openai import ScriptedOpenAI
from llmtop.testing.watch import WatchInThread

HI = [{"role": "user", "content": "hi"}]


class Seen:
    """A Watcher that keeps every exchange (ids from 1); `ended` is set at each finish."""

    def __init__(self) -> None:
        self.begun: list = []
        self.done: list = []
        self.ended = threading.Event()

    def started(self, ex) -> None:
        self.begun.append(ex)
        ex.id = len(self.begun)

    def progressed(self, ex) -> None:
        pass

    def finished(self, ex) -> None:
        self.done.append(ex)
        self.ended.set()


class Watch(WatchInThread):
    """A WatchProxy in front of `upstream`, served in a thread: `with Watch(u) as w:`,
    `w.url`, `w.seen`."""

    def __init__(self, upstream: str, **kwargs) -> None:
        port = free_port()
        self.seen = Seen()
        self.app = WatchProxy(upstream, ("127.0.0.1", port), self.seen, **kwargs)
        super().__init__(self.app)

    def __enter__(self) -> Self:  # type: ignore[override]
        super().__enter__()
        return self


def test_ollama_client_gets_the_same_bytes_and_the_same_answer():
    with ScriptedUpstream() as up, Watch(up.url) as w:
        body = {"model": "ok", "messages": HI}
        direct = httpx.post(up.url + "/api/chat", json=body)
        passed = httpx.post(w.url + "/api/chat", json=body)
        assert passed.content == direct.content  # byte for byte
        # the upstream's headers (its own Server and Date among them), nothing of the proxy's
        assert passed.headers.multi_items()[1:] == direct.headers.multi_items()[1:]
        assert [k for k, _ in passed.headers.multi_items()].count("server") == 1
        parts = ollama.Client(host=w.url).chat(model="ok", messages=HI, stream=True)
        # "Hel" + "lo" + "!" (scripted.SCENARIOS), parsed by the official client
        assert "".join(p.message.content for p in parts) == "Hello!"
        # unknown paths pass untouched, errors included
        assert httpx.get(w.url + "/api/version").json() == {"version": "0.0.0-scripted"}
        assert httpx.get(w.url + "/nowhere").status_code == 404
        assert httpx.get(w.url + "/").text == "Ollama is running"
    assert [ex.path for ex in w.seen.done] == ["/api/chat", "/api/chat"]  # only generations


def test_a_streamed_request_is_measured_against_the_scripted_truth():
    timing = Timing(first_s=0.05, chunks=5, gap_s=0.01)
    with ScriptedUpstream(timing) as up, Watch(up.url) as w:
        parts = list(ollama.Client(host=w.url).chat(model="timed", messages=HI, stream=True))
        assert w.seen.ended.wait(5)
    assert "".join(p.message.content for p in parts) == "t0 t1 t2 t3 t4"
    ex = w.seen.done[0]
    assert (ex.facts.model, ex.api, ex.status_code, ex.cancelled) == ("timed", "ollama", 200,
                                                                      False)
    first_text = next(e for e in ex.events if e.has_text)
    ttft_ns = first_text.t_ns - ex.send_ns
    # The truth: from the watch's send to the scripted server handing over its first line.
    # The watch's stamp can be later only by the loopback hop back to it and its event loop's
    # turn (2.1 ms once, in a full suite on 2 busy cores); a stamp of the wrong chunk would be
    # 10 ms off (gap_s), of the send 50 ms (first_s): 5 ms tells them apart.
    truth_ns = up.recorder.first_ns[0] - ex.send_ns
    assert 0 <= ttft_ns - truth_ns < 5_000_000
    # and the request reached the server after the watch's send stamp
    assert up.recorder.received_ns[0] >= ex.send_ns
    assert ex.events[-1].done and ex.events[-1].stats.eval_count == 5
    assert sum(e.has_text for e in ex.events) == 5
    assert ex.hop_in_ns is not None and ex.hop_in_ns >= 0
    assert ex.hop_out_ns is not None and ex.hop_out_ns >= 0


def test_a_client_that_leaves_stops_the_upstream():
    with ScriptedUpstream() as up, Watch(up.url) as w:
        with httpx.stream("POST", w.url + "/api/chat",
                          json={"model": "slow", "messages": HI}) as resp:
            for line in resp.iter_lines():
                if line:
                    break  # one chunk, then leave
        assert up.recorder.closed.wait(5)  # the scripted reply's generator was closed
        assert w.seen.ended.wait(5)
    assert up.recorder.cut_short == [True]  # "slow" streams 600 lines: it was cut
    ex = w.seen.done[0]
    assert ex.cancelled and not ex.events[-1].done


def test_openai_stream_passes_byte_for_byte_and_reads_usage_and_cache():
    with ScriptedOpenAI("llama-server") as up, Watch(up.url) as w:
        body = {"model": "llama-server", "messages": HI, "stream": True}
        direct = httpx.post(up.url + "/v1/chat/completions", json=body)
        passed = httpx.post(w.url + "/v1/chat/completions", json=body)
        assert w.seen.ended.wait(5)
    assert passed.content == direct.content
    ex = w.seen.done[0]
    assert "".join(e.content for e in ex.events) == "Hello!"
    stats = ex.events[-1].stats
    # scripted_openai: usage(11, 3, cached=2) and timings prompt_ms 30.5, predicted_ms 20.25
    assert (stats.prompt_eval_count, stats.eval_count, stats.prompt_cached_count) == (11, 3, 2)
    assert stats.prompt_eval_duration == 30_500_000 and stats.eval_duration == 20_250_000


def test_an_openai_stream_is_measured_against_the_scripted_truth():
    with ScriptedOpenAI("vllm") as up, Watch(up.url) as w:
        body = {"model": "vllm", "messages": HI, "stream": True}
        assert httpx.post(w.url + "/v1/chat/completions", json=body).status_code == 200
        assert w.seen.ended.wait(5)
    ex = w.seen.done[0]
    first_text = next(e for e in ex.events if e.has_text)
    # the first frame carries "Hel" (scripted_openai.HELLO): as for Ollama, the watch's TTFT
    # exceeds the truth only by the loopback hop back to it and its event loop's turn (1.9 ms
    # once in CI's full suite on 2 busy cores): the same 5 ms bound as the Ollama case above
    truth_ns = up.recorder.first_ns[0] - ex.send_ns
    assert 0 <= (first_text.t_ns - ex.send_ns) - truth_ns < 5_000_000
    assert ex.events[-1].stats.prompt_eval_count == 12  # usage(12, 3)


def test_an_unknown_model_is_forwarded_as_the_upstream_said_and_recorded_as_an_error():
    with ScriptedUpstream() as up, Watch(up.url) as w:
        resp = httpx.post(w.url + "/api/chat", json={"model": "nope", "messages": HI})
        assert w.seen.ended.wait(5)
    assert resp.status_code == 404 and resp.json() == {"error": "model 'nope' not found"}
    ex = w.seen.done[0]
    assert ex.events[-1].failure is not None
    assert str(ex.events[-1].failure.kind) == "model-not-found"


def test_foreign_host_and_missing_token_are_refused():
    with ScriptedUpstream() as up, Watch(up.url, token="s3cret-token-0123456789") as w:
        assert httpx.get(w.url + "/api/version").status_code == 401
        good = {"Authorization": "Bearer s3cret-token-0123456789"}
        assert httpx.get(w.url + "/api/version", headers=good).status_code == 200
        evil = {**good, "Host": "evil.example:11435"}
        assert httpx.get(w.url + "/api/version", headers=evil).status_code == 403
        page = {**good, "Origin": "https://evil.example"}
        assert httpx.get(w.url + "/api/version", headers=page).status_code == 403
        # asked again (servers/guard.py keeps the Host verdicts): the same answers
        assert httpx.get(w.url + "/api/version", headers=evil).status_code == 403
        assert httpx.get(w.url + "/api/version", headers=page).status_code == 403
        assert httpx.get(w.url + "/api/version", headers=good).status_code == 200


def test_the_kept_host_verdicts_stay_each_names_own():
    # servers/guard.py keeps the loopback verdict per name (lru_cache): asked twice, or after
    # more names than it keeps, each name still gets its own answer
    from llmtop.servers.guard import Guard

    guard = Guard("127.0.0.1")
    for i in range(300):  # past the cache's 256 names
        assert not guard.host_allowed(f"evil{i}.example:11435")
    for host in ("localhost:11435", "127.0.0.1:11435", "[::1]:11435", "app.localhost"):
        assert guard.host_allowed(host) and guard.host_allowed(host)
    assert not guard.host_allowed("evil0.example:11435")


def test_an_engine_that_does_not_answer_gets_a_502_and_an_unreachable_record():
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with Watch(dead) as w:
        resp = httpx.post(w.url + "/api/chat", json={"model": "m", "messages": HI})
        assert w.seen.ended.wait(5)
    assert resp.status_code == 502 and "did not answer" in resp.json()["error"]
    assert str(w.seen.done[0].events[-1].failure.kind) == "unreachable"


def test_a_generation_request_past_the_size_cap_is_refused_with_413(monkeypatch):
    monkeypatch.setattr("llmtop.servers.watch.connection.MAX_MEASURED_BODY", 100)
    with ScriptedUpstream() as up, Watch(up.url) as w:
        big = {"model": "ok", "messages": [{"role": "user", "content": "x" * 200}]}
        resp = httpx.post(w.url + "/api/chat", json=big)
    assert resp.status_code == 413 and "is not passed on" in resp.json()["error"]
    assert up.recorder.requests == []  # nothing reached the engine


def test_a_client_that_leaves_at_done_left_a_whole_answer_not_a_cancelled_one():
    with ScriptedOpenAI() as up, Watch(up.url) as w:
        body = {"model": "lingers", "messages": HI, "stream": True}
        with httpx.stream("POST", w.url + "/v1/chat/completions", json=body) as resp:
            for line in resp.iter_lines():
                if line == "data: [DONE]":
                    break  # as the official openai client does: close at [DONE]
        assert w.seen.ended.wait(5)
        assert up.recorder.closed.wait(5)  # the upstream was still closed at once
    # "lingers" ends its body 5 s after [DONE] (scripted_openai.LINGER_S): it was cut there
    assert up.recorder.cut_short == [True]
    ex = w.seen.done[0]
    assert not ex.cancelled and ex.answered and ex.events[-1].failure is None
    assert "".join(e.content for e in ex.events) == "Hello!"
