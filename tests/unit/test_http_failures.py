"""llmtop/engines/http.py: one table from an HTTP status or a transport error to a Failure.

The expected texts are written out by hand from the rules in `failure_for_http`'s docstring
(Ollama's 404 for a missing model names it; another 404 is a missing route; other 4xx are
the request's fault; the rest the server's), not computed by the code under test.
"""

from __future__ import annotations

import httpx
import pytest

from llmtop.engines.events import FailureKind
from llmtop.engines.http import (
    BUSY_REMEDY,
    Peer,
    error_text,
    failure_for_http,
    failure_for_transport,
    failure_in_stream,
    server_error,
)

URL = "http://127.0.0.1:11434"
PEER = Peer(URL, "an Ollama server", "start it with `ollama serve`", read_timeout_s=2.5)
CHECK_PEER = f"check that {URL} is an Ollama server"


@pytest.mark.parametrize(
    "status, body, kind, message, remedy",
    [
        (404, b'{"error":"model \'qwen\' not found"}', FailureKind.MODEL_NOT_FOUND,
         f"model 'qwen' not found at {URL} (installed: a, b)",
         "pull it with `ollama pull qwen` or pick an installed one with --model"),
        # newer Ollama words it differently; it still names the model
        (404, '{"error":"model \\"qwen\\" not found, try pulling it first"}',
         FailureKind.MODEL_NOT_FOUND,
         f"model 'qwen' not found at {URL} (installed: a, b)",
         "pull it with `ollama pull qwen` or pick an installed one with --model"),
        # the ollama client hands over the error text it already took out of the JSON
        (404, "model 'qwen' not found", FailureKind.MODEL_NOT_FOUND,
         f"model 'qwen' not found at {URL} (installed: a, b)",
         "pull it with `ollama pull qwen` or pick an installed one with --model"),
        (404, b"404 page not found", FailureKind.PROTOCOL,
         f"{URL} did not answer as an Ollama server (HTTP 404: 404 page not found)", CHECK_PEER),
        (404, b"", FailureKind.PROTOCOL,
         f"{URL} did not answer as an Ollama server (HTTP 404: Not Found)", CHECK_PEER),
        (400, b'{"error":"think must be true"}', FailureKind.BAD_REQUEST,
         f"{URL} rejected the request (HTTP 400): think must be true",
         "check the model name and options"),
        (422, b"  plain words \n", FailureKind.BAD_REQUEST,
         f"{URL} rejected the request (HTTP 422): plain words", "check the model name and options"),
        (500, b'{"error":"llama runner process has terminated"}', FailureKind.SERVER_ERROR,
         f"{URL} failed (HTTP 500): llama runner process has terminated",
         "check the server's log and retry"),
        (502, b"", FailureKind.SERVER_ERROR, f"{URL} failed (HTTP 502): Bad Gateway",
         "check the server's log and retry"),
        # busy engines: never latency samples, and the remedy names the queue settings
        (503, b'{"error": 7}', FailureKind.BUSY,
         f'{URL} is busy and refused the request (HTTP 503: {{"error": 7}})', BUSY_REMEDY),
        (429, b"", FailureKind.BUSY,
         f"{URL} is busy and refused the request (HTTP 429: Too Many Requests)", BUSY_REMEDY),
        # Ollama's ErrMaxQueue text (server/sched.go) with its 503
        (503, b'{"error":"server busy, please try again.  maximum pending requests exceeded"}',
         FailureKind.BUSY, (f"{URL} is busy and refused the request (HTTP 503: server busy, "
         "please try again.  maximum pending requests exceeded)"), BUSY_REMEDY),
        # llama.cpp's server says it in a 500 when every slot is taken
        (500, b'{"error":"no slot available"}', FailureKind.BUSY,
         f"{URL} is busy and refused the request (HTTP 500: no slot available)", BUSY_REMEDY),
    ],
)
def test_status_and_body_give_kind_message_and_remedy(status, body, kind, message, remedy):
    failure = failure_for_http(status, body, peer=PEER, model="qwen", installed=["a", "b"])
    assert (failure.kind, failure.message, failure.remedy) == (kind, message, remedy)


def test_a_missing_model_with_nothing_installed_says_none():
    failure = failure_for_http(404, b'{"error":"model \'x\' not found"}', peer=PEER, model="x")
    assert failure.message == f"model 'x' not found at {URL} (installed: none)"


def test_a_404_without_a_model_asked_for_is_a_missing_route():
    # e.g. GET /api/tags on a server that has no such route
    failure = failure_for_http(404, b'{"error":"not found"}', peer=PEER)
    assert failure.kind == FailureKind.PROTOCOL


def test_error_text_and_server_error():
    assert server_error(b'{"error":"boom"}') == "boom"
    assert server_error(b'{"error":{"nested":1}}') is None
    assert server_error(b"[1, 2]") is None and server_error(b"not json") is None
    assert error_text(418, b"x" * 300) == "x" * 200
    assert error_text(418, b"") == "I'm a teapot"


@pytest.mark.parametrize(
    "exc, kind, message",
    [
        (httpx.ConnectError("[Errno 111] Connection refused"), FailureKind.UNREACHABLE,
         f"cannot reach an Ollama server at {URL} ([Errno 111] Connection refused)"),
        (httpx.ConnectTimeout(""), FailureKind.UNREACHABLE,
         f"cannot reach an Ollama server at {URL} (ConnectTimeout)"),
        (ConnectionRefusedError("refused"), FailureKind.UNREACHABLE,
         f"cannot reach an Ollama server at {URL} (refused)"),
        (httpx.ReadTimeout("timed out"), FailureKind.TIMEOUT, f"no data from {URL} for 2.5 s"),
        (httpx.RemoteProtocolError("peer closed"), FailureKind.TRUNCATED,
         f"the connection to {URL} broke mid-stream (RemoteProtocolError: peer closed)"),
        (httpx.ReadError("reset"), FailureKind.TRUNCATED,
         f"the connection to {URL} broke mid-stream (ReadError: reset)"),
        (httpx.WriteError("broken pipe"), FailureKind.SERVER_ERROR,
         f"request to {URL} failed: WriteError: broken pipe"),
    ],
)
def test_transport_errors_give_kind_and_message(exc, kind, message):
    failure = failure_for_transport(exc, peer=PEER)
    assert (failure.kind, failure.message) == (kind, message)
    if kind is FailureKind.UNREACHABLE:
        assert failure.remedy == "start it with `ollama serve`"


def test_a_busy_error_mid_stream_is_busy():
    failure = failure_in_stream("server busy, please try again", peer=PEER)
    assert failure.kind == FailureKind.BUSY and "OLLAMA_NUM_PARALLEL" in failure.remedy
    assert failure_in_stream("boom", peer=PEER).kind == FailureKind.SERVER_ERROR
