"""Request validation and stop-string handling of the embedded engine."""

import pytest

from llmtop.servers.embedded.llama_backend import StopScanner
from llmtop.servers.embedded.requests import BadRequest, parse_body, parse_keep_alive, parse_request

M = "gemma3:270m"


@pytest.mark.parametrize(
    "value, seconds",
    [
        (None, 300.0),
        (0, 0.0),
        (60, 60.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("-1", -1.0),
        ("-1m", -60.0),
        ("250ms", 0.25),
    ],
)
def test_keep_alive(value, seconds):
    assert parse_keep_alive(value) == seconds


@pytest.mark.parametrize("value", ["soon", True, [1]])
def test_bad_keep_alive(value):
    with pytest.raises(BadRequest, match="keep_alive"):
        parse_keep_alive(value)


def test_options_are_honoured():
    job = parse_request(
        {
            "model": M,
            "messages": [{"role": "user", "content": "hi"}],
            "options": {
                "temperature": 0,
                "seed": 42,
                "num_predict": 16,
                "num_ctx": 2048,
                "top_k": 5,
                "top_p": 0.5,
                "stop": ["\n\n"],
                "mirostat": 2,
            },
        },
        chat=True,
        model_name=M,
    )
    s = job.sampling
    assert (s.temperature, s.seed, s.num_predict, s.top_k, s.top_p, s.stop) == (
        0.0,
        42,
        16,
        5,
        0.5,
        ("\n\n",),
    )
    assert job.num_ctx == 2048 and job.stream is True and not job.load_only


@pytest.mark.parametrize(
    "body, message",
    [
        ({"messages": []}, "model is required"),
        ({"model": M, "messages": "hi"}, "messages must be a list"),
        ({"model": M, "messages": [{"role": "robot", "content": "x"}]}, r"messages\[0\]\.role"),
        (
            {"model": M, "messages": [{"role": "user", "content": 3}]},
            r"messages\[0\]\.content must be a string",
        ),
        (
            {"model": M, "messages": [], "options": {"temperature": "hot"}},
            "option 'temperature' must be a number",
        ),
        (
            {"model": M, "messages": [], "options": {"num_predict": 1.5}},
            "option 'num_predict' must be an integer",
        ),
        ({"model": M, "messages": [], "options": {"stop": 7}}, "option 'stop'"),
        ({"model": M, "messages": [], "stream": "yes"}, "stream must be true or false"),
        ({"model": M, "messages": [], "think": True}, "does not support thinking"),
    ],
)
def test_bad_chat_requests(body, message):
    with pytest.raises(BadRequest, match=message) as info:
        parse_request(body, chat=True, model_name=M)
    assert info.value.status == 400


def test_unknown_model_is_404():
    with pytest.raises(BadRequest, match="model 'llama3' not found") as info:
        parse_request({"model": "llama3", "prompt": "x"}, chat=False, model_name=M)
    assert info.value.status == 404


def test_empty_prompt_means_load_only():
    assert parse_request({"model": M}, chat=False, model_name=M).load_only
    assert parse_request({"model": M, "messages": []}, chat=True, model_name=M).load_only
    assert not parse_request({"model": M, "prompt": "x"}, chat=False, model_name=M).load_only


def test_raw_with_system_is_rejected():
    with pytest.raises(BadRequest, match="raw mode does not support"):
        parse_request(
            {"model": M, "prompt": "x", "raw": True, "system": "s"}, chat=False, model_name=M
        )


@pytest.mark.parametrize("raw, message", [(b"", "missing request body"), (b"{bad", "invalid JSON"),
                                          (b"[1]", "must be a JSON object")])
def test_bad_bodies(raw, message):
    with pytest.raises(BadRequest, match=message):
        parse_body(raw)


def test_stop_scanner_holds_back_a_possible_stop_and_cuts_at_it():
    s = StopScanner(["<end_of_turn>"])
    assert s.feed("Hello <end") == ("Hello ", False)  # "<end" might start the stop string
    assert s.feed("_of_turn> more") == ("", True)
    s = StopScanner(["<end_of_turn>"])
    assert s.feed("a <e") == ("a ", False)
    assert s.feed("x") == ("<ex", False)  # it was not the stop string after all
    assert s.flush() == ""


def test_stop_scanner_without_stops_passes_through():
    assert StopScanner([]).feed("<end") == ("<end", False)
