"""The watch's reading of passing bytes (servers/watch/meter.py), block by block, with the
block boundaries where a socket may put them."""

from __future__ import annotations

import json

from llmtop.engines.events import FailureKind
from llmtop.engines.http import Peer
from llmtop.servers.watch.meter import Meter, endpoint_of, read_request
from llmtop.testing.scripted_openai import SCENARIOS

PEER = Peer("http://127.0.0.1:11434", "the watched engine", "start it")


def meter(api, shape, *, streamed=True, status=200, **kw):
    return Meter(api, shape, streamed=streamed, status=status, peer=PEER, **kw)


def ndjson(*objs):
    return b"".join(json.dumps(o).encode() + b"\n" for o in objs)


def test_endpoints_and_request_facts():
    assert endpoint_of("POST", "/api/chat") == ("ollama", "chat")
    assert endpoint_of("POST", "/v1/completions") == ("openai", "completions")
    assert endpoint_of("GET", "/api/chat") is None and endpoint_of("POST", "/api/embed") is None
    facts = read_request("ollama", "chat", json.dumps({
        "model": "m", "messages": [{"role": "user", "content": "a"},
                                   {"role": "assistant", "content": "b"},
                                   {"role": "user", "content": "c"}],
        "options": {"num_ctx": 8192}}).encode())
    assert (facts.model, facts.stream, facts.prompt, facts.options) == ("m", True, "c",
                                                                        {"num_ctx": 8192})
    assert read_request("openai", "chat", b'{"model": "x"}').stream is False  # OpenAI default
    assert read_request("ollama", "chat", b"not json").model is None


def test_ndjson_lines_split_across_blocks_are_stamped_when_complete():
    m = meter("ollama", "generate")
    body = ndjson({"response": "He", "done": False},
                  {"response": "", "thinking": "hm", "done": False},
                  {"response": "y", "done": True, "eval_count": 2, "eval_duration": 5})
    m.feed(body[:10], 100)  # half of the first line
    assert m.events == []
    m.feed(body[10:60], 200)
    m.feed(body[60:], 300)
    m.end(400)
    assert [(e.t_ns, e.content, e.thinking, e.done) for e in m.events] == [
        (200, "He", "", False), (300, "", "hm", False), (300, "y", "", True)]
    assert m.events[-1].stats.eval_count == 2


def test_an_error_line_mid_stream_and_a_truncation():
    m = meter("ollama", "chat")
    m.feed(ndjson({"message": {"content": "a"}, "done": False}, {"error": "runner died"}), 1)
    assert m.events[-1].failure.kind == FailureKind.SERVER_ERROR
    cut = meter("ollama", "chat")
    cut.feed(ndjson({"message": {"content": "a"}, "done": False}), 1)
    cut.end(2)
    assert cut.events[-1].failure.kind == FailureKind.TRUNCATED


def test_openai_sse_byte_by_byte_reads_as_whole_events():
    m = meter("openai", "chat")
    body = b"".join(SCENARIOS["crlf"])  # CRLF line ends, every byte its own block
    for i, byte in enumerate(body):
        m.feed(bytes([byte]), i)
    m.end(len(body))
    assert "".join(e.content for e in m.events) == "Hello!"
    assert m.events[-1].done and m.events[-1].failure is None


def test_completions_text_and_non_streamed_replies():
    m = meter("openai", "completions")
    m.feed(b'data: {"choices": [{"text": "Hi", "finish_reason": null}]}\n\n'
           b'data: {"choices": [{"text": "", "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n', 5)
    assert [e.content for e in m.events] == ["Hi", ""] and m.events[-1].done
    whole = meter("openai", "chat", streamed=False)
    reply = {"choices": [{"message": {"content": "ok", "reasoning_content": "why"},
                          "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 9, "completion_tokens": 1,
                       "prompt_tokens_details": {"cached_tokens": 4}}}
    raw = json.dumps(reply).encode()
    whole.feed(raw[:7], 1)
    whole.feed(raw[7:], 2)
    whole.end(3)
    (event,) = whole.events
    # stamped at the last block's arrival (2), not at the end's notice (3)
    assert (event.t_ns, event.content, event.thinking, event.done) == (2, "ok", "why", True)
    assert (event.stats.prompt_eval_count, event.stats.prompt_cached_count) == (9, 4)


def test_an_http_error_names_the_model_and_a_body_that_does_not_decompress_is_said():
    m = meter("ollama", "chat", status=404, model="qwen")
    m.feed(b'{"error": "model \'qwen\' not found"}', 1)
    m.end(2)
    assert m.events[-1].failure.kind == FailureKind.MODEL_NOT_FOUND
    z = meter("ollama", "chat", encoding="gzip")
    z.feed(b"\x1f\x8b...", 1)  # a gzip magic number, then not gzip
    z.end(2)
    (event,) = z.events
    assert event.done and event.failure.kind == FailureKind.LIMIT
    assert "does not decompress" in event.failure.message
