"""A stream a proxy forwards in blocks of bytes (nginx's default proxy_buffering): every chunk
arrives, but bunched (llmtop/sessions/measure/timeline.py, `blocks`). The stream is judged
buffered with the blocks as evidence; TTFT is said to include the first block's wait; the
client's TPOT, decode rate and overhead are n/a; the server's rates stay."""

from __future__ import annotations

import asyncio
import io
import json

from llmtop.commands.run import print_metrics
from llmtop.engines.events import ServerStats, StreamEvent
from llmtop.engines.ollama import OllamaEngine
from llmtop.sessions.measure.request import RequestCollector, chat_messages, run_request
from llmtop.sessions.measure.timeline import blocks, compute_metrics
from llmtop.testing.paced import BLOCK_BYTES, BlockProxy, LineServer, ollama_paced_reply

MS = 1_000_000
SENT = 10**12


def at(ms: float, text: str = " w", **kw: object) -> StreamEvent:
    return StreamEvent(SENT + round(ms * MS), content=text, **kw)  # type: ignore[arg-type]


def test_two_hundred_tokens_in_blocks_of_thirty_are_buffered() -> None:
    # 200 tokens made 20 ms apart from 100 ms: token i at 100 + 20 i. A proxy forwards 30
    # chunks a block, sent when its last token is made: block j (0…6) at 100 + 20 (30 j + 29)
    # (680, 1280, …, 3680), the last holding 20 (tokens 180…199) with the done line at 4080.
    stats = ServerStats(eval_count=200, eval_duration=4_000 * MS, load_duration=1 * MS,
                        prompt_eval_count=20, prompt_eval_duration=50 * MS)
    events = [at(100 + 20 * min(30 * (i // 30) + 29, 199)) for i in range(200)]
    m = compute_metrics(SENT, [*events, StreamEvent(SENT + 4_080 * MS, done=True, stats=stats)])
    assert m.buffered is not None
    # 7 blocks, median 30 chunks = 30 tokens (200 tokens / 200 chunks) = 30 × 5 bytes (" w"
    # is 2 bytes: 60), one every 600 ms; 193 of 199 gaps joined, under a quarter of the mean
    # gap (4080 − 680) / 199 = 17.09 ms → 4.3 ms
    assert m.buffered.startswith(
        "delivered in 7 blocks of a median 30 chunks (30 tokens, 60 bytes of text), one every "
        "600 ms; 193 of 199 chunk gaps under 4.3 ms")
    # the first block's wait: its 29 tokens after the first, 20 ms each (4000 ms / 200)
    assert "TTFT includes the wait for the first block (30 chunks: about 580 ms" in m.buffered
    # client: 199 tokens over 4080 − 680 ms = 58.5 tok/s; server 200 / 4 s = 50.0 tok/s
    assert "the client's decode rate, 58.5 tok/s, is above the server's own 50.0 tok/s" in (
        m.buffered)
    assert (m.tpot_ms, m.client_decode_tps, m.overhead_ms) == (None, None, None)
    assert m.ttft_ms == 680.0  # kept, as the client saw it; the reason says what it holds
    assert m.server_decode_tps == 50.0


def test_a_machine_that_reads_late_a_few_times_is_not_blocks() -> None:
    # 100 tokens 20 ms apart; three times the client read 5 at once (12 of 99 gaps ~0):
    # a scattered bunching, not a stream delivered in blocks
    stamps = [120.0 + 20 * i for i in range(100)]
    for start in (10, 40, 70):
        stamps[start:start + 5] = [stamps[start + 4]] * 5
    stats = ServerStats(eval_count=100, eval_duration=2_000 * MS)
    events = [at(t) for t in stamps]
    m = compute_metrics(SENT, [*events, StreamEvent(SENT + 2_101 * MS, done=True, stats=stats)])
    assert m.buffered is None
    assert m.tpot_ms == (2_101.0 - 120.0) / 99


def test_speculative_decoding_groups_are_its_own_pace() -> None:
    # a draft model's accepted tokens come 4 at a time, one step every 40 ms: 75 % of the gaps
    # are 0 by design (draft_count says so), and the client's rate is the server's
    stats = ServerStats(eval_count=40, eval_duration=400 * MS, draft_count=50,
                        draft_accepted_count=30)
    events = [at(100 + 40 * (i // 4)) for i in range(40)]
    assert blocks(events, stats, client_tps=None) is None


def test_a_first_block_the_server_contradicts_is_blocks_at_half_the_gaps_joined() -> None:
    # 30 tokens 20 ms apart from 100 ms; something holds the first 16 back (sent with token
    # 15 at 400 ms), then lets each through as made (420 … 680): 15 of 29 gaps joined
    # (0.52, under the 0.75 of the gap rule alone), 15 blocks of a median 1 chunk
    stamps = [400.0] * 16 + [100 + 20 * i for i in range(16, 30)]
    stats = ServerStats(eval_count=30, eval_duration=600 * MS)
    events = [at(t) for t in stamps]
    m = compute_metrics(SENT, [*events, StreamEvent(SENT + 680 * MS, done=True, stats=stats)])
    # client: 29 tokens over 680 − 400 ms = 103.6 tok/s, over 1.25 × the server's 50 tok/s
    assert m.buffered is not None and m.buffered.startswith(
        "delivered in 15 blocks of a median 1 chunk (1 token, 2 bytes of text), one every 20 ms")
    # the first block's wait: its 15 tokens after the first, 20 ms each (600 ms / 30)
    assert "(16 chunks: about 300 ms of the server's decoding)" in m.buffered
    assert "103.6 tok/s, is above the server's own 50.0 tok/s" in m.buffered
    assert m.tpot_ms is None and m.overhead_ms is None


def test_the_same_gaps_without_the_contradiction_are_not_blocks() -> None:
    # as above, but the first 16 arrive as made (no held first block): half the gaps are not
    # joined and the client's rate is the server's
    stamps = [100 + 20 * i for i in range(30)]
    stats = ServerStats(eval_count=30, eval_duration=600 * MS)
    m = compute_metrics(SENT, [*(at(t) for t in stamps),
                               StreamEvent(SENT + 680 * MS, done=True, stats=stats)])
    assert m.buffered is None and m.tpot_ms == (680.0 - 100.0) / 29


def lines_per_flush(sent: bytes, flushes: list[int]) -> list[int]:
    """How many text lines of the chunked NDJSON answer `sent` end in each of the proxy's
    flushes (`flushes`: their sizes in order): the client can parse a line once the block
    holding its last byte has arrived. Computed from the bytes alone."""
    head_end = sent.index(b"\r\n\r\n") + 4
    pos, ends = head_end, []
    while True:
        size_end = sent.index(b"\r\n", pos)
        size = int(sent[pos:size_end], 16)
        if size == 0:
            break
        data = sent[size_end + 2:size_end + 2 + size]
        if json.loads(data)["message"]["content"]:
            ends.append(size_end + 2 + size - 1)  # the offset of the line's "\n"
        pos = size_end + 2 + size + 2
    bounds, total = [], 0
    for size in flushes:
        total += size
        bounds.append(total)
    counts = [0] * len(flushes)
    for end in ends:
        counts[next(j for j, b in enumerate(bounds) if end < b)] += 1
    return [c for c in counts if c]


async def test_a_paced_server_behind_a_4_kib_proxy_is_recognised() -> None:
    # 120 tokens made 10 ms apart, the first at 50 ms, through a proxy that forwards 4096 bytes
    # at a time: each line is 116 bytes + 6 of chunk framing, so about 33 lines a block
    server = LineServer(ollama_paced_reply(120, first_ms=50.0, gap_ms=10.0))
    proxy = BlockProxy(await server.start())
    engine = OllamaEngine(f"http://127.0.0.1:{await proxy.start()}")
    try:
        collector = RequestCollector("hi", {"num_predict": 120}, "paced")
        result = await run_request(
            lambda: engine.stream_chat("paced", chat_messages("hi"),
                                       options={"num_predict": 120}), collector)
    finally:
        await engine.aclose()
        await proxy.stop()
        await server.stop()
    assert result.status == "ok" and result.metrics.output_tokens == 120
    expected = lines_per_flush(server.sent[0], [size for _, size in proxy.flushes])
    assert sum(expected) == 120 and all(size == BLOCK_BYTES for _, size in proxy.flushes[:-1])
    m = result.metrics
    assert m.buffered is not None, m.itl_ms
    median = sorted(expected)[len(expected) // 2] if len(expected) % 2 else (
        sum(sorted(expected)[len(expected) // 2 - 1:len(expected) // 2 + 1]) / 2)
    assert m.buffered.startswith(f"delivered in {len(expected)} blocks of a median {median:g} "
                                 "chunks"), m.buffered
    assert f"TTFT includes the wait for the first block ({expected[0]} chunks" in m.buffered
    # the first block leaves the proxy only once its last line was written: at least
    # 50 + (k − 1) × 10 ms after the request (asyncio's sleeps never end early)
    assert m.ttft_ms is not None and m.ttft_ms >= 50.0 + (expected[0] - 1) * 10.0 - 1.0
    assert (m.tpot_ms, m.client_decode_tps, m.overhead_ms) == (None, None, None)
    assert m.server_decode_tps == 100.0  # 120 tokens / 1.2 s, the server's own figure
    out = io.StringIO()
    print_metrics(result, out)
    text = out.getvalue()
    assert "(includes the wait while the text was held back: the stream was buffered)" in text
    assert "buffered      client TPOT, decode and overhead are n/a: delivered in" in text
    assert "overhead      n/a" in text


def test_the_block_proxy_forwards_every_byte() -> None:
    # the proxy is a test double: it must change the timing of the bytes, never the bytes
    async def main() -> tuple[bytes, bytes]:
        server = LineServer(ollama_paced_reply(40, first_ms=2.0, gap_ms=1.0))
        proxy = BlockProxy(await server.start())
        reader, writer = await asyncio.open_connection("127.0.0.1", await proxy.start())
        writer.write(b"POST /api/chat HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        got = await reader.read()
        writer.close()
        await proxy.stop()
        await server.stop()
        return got, server.sent[0]

    got, sent = asyncio.run(main())
    assert got == sent and len(sent) > BLOCK_BYTES
