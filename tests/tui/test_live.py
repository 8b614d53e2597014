"""LiveRequest (pure): the live figures from arrival stamps, exact."""

from __future__ import annotations

from llmtop.engines.events import StreamEvent
from llmtop.sessions.measure.request import RequestCollector
from llmtop.tui.state import fmt
from llmtop.tui.state.live import CONTENT, THINKING, LiveRequest
from llmtop.tui.widgets.metrics_strip import live_texts

MS = 1_000_000


def test_live_numbers_from_stamps() -> None:
    collector = RequestCollector(prompt="p", options={}, model="m", sent_ns=1_000 * MS)
    live = LiveRequest(collector)
    assert live.ttft_ms is None and live.live_decode_cps is None
    live.dirty = False
    live.add(StreamEvent(t_ns=1_100 * MS, thinking="hm"))
    assert live.dirty and live.ttft_ms == 100.0
    live.add(StreamEvent(t_ns=1_125 * MS, content="a"))
    live.add(StreamEvent(t_ns=1_150 * MS, content="b"))
    live.add(StreamEvent(t_ns=1_160 * MS, done=True))  # no text: not a chunk
    assert live.itl_ms == [25.0, 25.0]
    assert live.chunks == 3
    assert live.live_decode_cps == 40.0  # 2 gaps in 50 ms
    assert live.parts == [(THINKING, ["hm"]), (CONTENT, ["a", "b"])]
    # the metrics strip's live row from the same figures
    assert {wid: str(text) for wid, text in live_texts(live).items()} == {
        "ttft": "TTFT 100.0 ms",
        "count": "chunks 3",
        "decode": "decode 40.0 chunk/s",
    }


def test_formatters_never_invent_zero() -> None:
    assert fmt.pct(None) == "warming up"
    assert fmt.ms(None) == "n/a" and fmt.ms(123.44) == "123.4 ms"
    assert fmt.rate(None) == "n/a"
    assert fmt.size(1536) == "1.5 KiB" and fmt.size(3 * 1024**3) == "3.0 GiB"
    assert fmt.bar(50.0, 4) == "██  " and fmt.bar(None, 3) == "···"
