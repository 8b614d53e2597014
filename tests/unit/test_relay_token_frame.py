"""The relay's token frame, built with one format on the path of every chunk, is the same
bytes the general `frame()` writes (servers/relay/stream.py)."""

from __future__ import annotations

from llmtop.servers.relay.stream import frame, token_frame


def test_token_frame_is_the_general_frame_byte_for_byte() -> None:
    # 12_345_678 ns after t0 = 12.345678 ms, rounded to the µs: 12.346
    t0, t = 1_000_000_000, 1_012_345_678
    texts = ('He said "hé"\n\t\\ ✓', "")
    expected = (b'event: token\ndata: {"content":"He said \\"h\xc3\xa9\\"\\n\\t\\\\ \xe2\x9c\x93",'
                b'"thinking":"","relay_recv_ns":1012345678,"relay_offset_ms":12.346}\n\n')
    assert token_frame(texts, t, t0) == expected
    general = frame("token", {"content": texts[0], "thinking": texts[1], "relay_recv_ns": t,
                              "relay_offset_ms": 12.346})
    assert general == expected


def test_token_frame_keeps_a_text_that_is_not_a_string_as_json_has_it() -> None:
    # an upstream that sends a number as content: relayed as the number, as before
    assert token_frame((5, ""), 2_000_000, 1_000_000) == (  # type: ignore[arg-type]
        b'event: token\ndata: {"content":5,"thinking":"","relay_recv_ns":2000000,'
        b'"relay_offset_ms":1.0}\n\n')
