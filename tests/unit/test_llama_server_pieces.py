"""llama-server's own figures, piece by piece, with values read off by hand: its command
line's flags, `/props` + `/slots` as the engine configuration, `/metrics`, the per-chunk
token counts and prompt progress of `timings_per_token` / `return_progress`, draft
acceptance, per-token ITL, a server-reported cache hit, the TUI's prefill line.
(The real server: tests/integration/test_llama_server_real.py.)"""

from __future__ import annotations

import asyncio

import pytest

from llmtop.engines.events import PromptProgress, ServerStats, StreamEvent
from llmtop.engines.llama_props import config_from, describe, flags_from_argv, metrics_from_text
from llmtop.engines.openai import OpenAIEngine
from llmtop.engines.openai_server import ServerKind
from llmtop.sessions.analysis.run import BenchStatus, first_pass_status
from llmtop.sessions.measure.request import RequestCollector, chat_messages, run_request
from llmtop.sessions.measure.timeline import compute_metrics, per_token_itl, server_prefill_tps
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.runners.load.server_metrics import ServerWatch, summarize
from llmtop.testing.scripted_openai import ScriptedOpenAI
from llmtop.tui.state.live import LiveRequest
from llmtop.tui.state.prefill import progress_text
from tests.unit.test_analysis_report import record_json

MS = 1_000_000


def test_flags_from_a_command_line_in_both_spellings():
    argv = ["--model", "m.gguf", "-np", "4", "--ctx-size=8192", "-t", "2", "--flash-attn", "on",
            "-ctk", "q8_0", "--no-repack", "--metrics", "-md", "d.gguf", "--cache-ram", "0"]
    assert flags_from_argv(argv) == {
        "parallel": "4", "ctx_size": "8192", "threads": "2", "flash_attn": "on",
        "cache_type_k": "q8_0", "repack": False, "metrics": True, "model_draft": "d.gguf",
        "cache_ram": "0"}


def test_props_and_slots_make_the_effective_configuration_and_its_line():
    props = {"build_info": "b7000-abc", "total_slots": 4, "model_path": "/m.gguf",
             "chat_template": "{{- '<|im_start|>' + message.role }}", "endpoint_metrics": True,
             "default_generation_settings": {"n_ctx": 1024, "params": {}}}
    slots = [{"id": i, "n_ctx": 1024, "speculative": False, "is_processing": i == 0,
              "params": {}} for i in range(4)]
    cfg = config_from(props, slots)
    assert cfg == {"server": "llama-server", "build_info": "b7000-abc", "model_path": "/m.gguf",
                   "total_slots": 4, "chat_template": "chatml", "n_ctx_per_slot": 1024,
                   "metrics_endpoint": True, "speculative": False,
                   "slots": [{"id": i, "n_ctx": 1024, "speculative": False,
                              "is_processing": i == 0} for i in range(4)]}
    cfg["flags"] = {"threads": "2", "repack": False}
    # flash-attn and the KV types absent from the command line: llama-server's defaults
    assert describe(cfg) == ("llama-server b7000-abc: 4 slots × 1024 ctx, 2 threads, "
                             "flash-attn auto (default), KV f16/f16, repack off, "
                             "ChatML template")
    assert describe(config_from(None, None)) == "llama-server"  # nothing answered
    cfg["flags"] = {"source": "not read: no local llama-server process …"}
    assert describe(cfg) == "llama-server b7000-abc: 4 slots × 1024 ctx, ChatML template"


METRICS_TEXT = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1200
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 4
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 2
"""


def test_metrics_text_and_a_level_summary():
    m = metrics_from_text(METRICS_TEXT)
    # prometheus_client drops a counter's _total suffix from the family, not from the sample
    assert m == {"prompt_tokens_total": 1200.0, "requests_processing": 4.0,
                 "requests_deferred": 2.0}
    first = {"prompt_tokens_total": 1000.0, "tokens_predicted_total": 50.0}
    last = {"prompt_tokens_total": 1200.0, "tokens_predicted_total": 90.0}
    assert summarize(first, last, {"requests_processing": 4.0, "requests_deferred": 2.0}, 5) == {
        "source": "llama-server /metrics", "samples": 5, "max_requests_processing": 4.0,
        "max_requests_deferred": 2.0, "prompt_tokens": 200.0, "tokens_predicted": 40.0}


async def test_the_watch_keeps_the_peaks_between_first_and_last_scrape():
    scrapes = [{"requests_processing": 1.0, "prompt_tokens_total": 0.0},
               {"requests_processing": 4.0, "requests_deferred": 3.0},
               {"requests_processing": 2.0, "prompt_tokens_total": 500.0}]
    reads = []
    all_read = asyncio.Event()

    async def read():
        reads.append(1)
        if len(reads) >= len(scrapes):
            all_read.set()
        return scrapes[len(reads) - 1] if len(reads) <= len(scrapes) else None

    watch = ServerWatch(read, interval_s=0.001)
    watch.start()
    await all_read.wait()
    found = await watch.stop()  # later reads answer None: the last scrape stays the third
    assert found["max_requests_processing"] == 4.0 and found["max_requests_deferred"] == 3.0
    assert found["prompt_tokens"] == 500.0
    assert await ServerWatch(None).stop() is None  # no reader: nothing watched


async def test_speculative_stream_through_the_client():
    with ScriptedOpenAI("llama-server") as up:
        engine = OpenAIEngine(up.url, kind=ServerKind("llama-server", "b1-scripted"))
        collector = RequestCollector("hi", {}, "llama-server-spec")
        try:
            result = await run_request(
                lambda: engine.stream_chat("llama-server-spec", chat_messages("hi")), collector)
        finally:
            await engine.aclose()
        body = up.recorder.requests[-1][1]
    assert body["timings_per_token"] is True and body["return_progress"] is True
    progress = [e.progress for e in result.events if e.progress is not None]
    assert progress == [PromptProgress(11, 2, 2, 0.0), PromptProgress(11, 2, 11, 30.0)]
    text = [e for e in result.events if e.has_text]
    assert [e.tokens for e in text] == [1, 1, 1]  # predicted_n 1, 2, 3 differenced
    # TTFT starts at "Hel", not at either progress chunk, which came first
    assert result.metrics.ttft_ms == (text[0].t_ns - result.sent_ns) / MS
    assert result.stats.draft_count == 4 and result.stats.draft_accepted_count == 3
    assert result.stats.draft_acceptance == 0.75
    assert len(result.metrics.itl_token_ms) == 2  # 3 tokens: 2 gaps, whichever way they came


def test_per_token_itl_splits_a_delivery_of_several_tokens():
    events = [StreamEvent(0, "a", tokens=2),  # the first delivery: 2 tokens, so 1 gap of 0
              StreamEvent(10 * MS, "b", tokens=1),
              StreamEvent(40 * MS, "c", tokens=1), StreamEvent(40 * MS, "d", tokens=2),
              StreamEvent(41 * MS, done=True)]
    # deliveries: 0 ms (2 tokens), 10 ms (1), 40 ms (1 + 2 = 3): 0; 10; 30/3 three times
    assert per_token_itl(events) == (0.0, 10.0, 10.0, 10.0, 10.0)
    # chunk gaps would say 10, 30, 0: one long gap and one of nothing
    assert compute_metrics(0, events).itl_ms == (10.0, 30.0, 0.0)
    assert per_token_itl([StreamEvent(0, "a"), StreamEvent(5, "b", tokens=1)]) == ()


def test_prefill_rate_and_overhead_of_a_server_that_reports_its_cache():
    stats = ServerStats(prompt_eval_count=100, prompt_eval_duration=5 * MS, eval_count=2,
                        eval_duration=4 * MS, prompt_cached_count=95,
                        source="usage + llama.cpp timings")
    # 95 of 100 from the cache is a cache hit (timeline.prompt_cache_hit, ≥ half): "cached",
    # no prefill rate at all (neither 100 / 5 ms = 20,000 tok/s nor 5 / 5 ms = 1,000)
    assert server_prefill_tps(stats) is None
    # 20 of 100 cached is not a hit: the rate counts the 80 evaluated tokens, 80 / 5 ms
    partial = ServerStats(prompt_eval_count=100, prompt_eval_duration=5 * MS, eval_count=2,
                          eval_duration=4 * MS, prompt_cached_count=20)
    assert server_prefill_tps(partial) == pytest.approx(16_000.0)
    events = [StreamEvent(66 * MS, "x"), StreamEvent(70 * MS, "y"),
              StreamEvent(71 * MS, done=True, stats=stats)]
    # no load phase in a request to an OpenAI server: overhead = TTFT 66 − prompt_ms 5 = 61
    assert compute_metrics(0, events).overhead_ms == pytest.approx(61.0)


def test_a_request_the_server_reports_as_cached_is_no_sample():
    data = record_json(0, prompt_eval_count=100)
    data["stats"].update(prompt_cached_count=95, source="usage + llama.cpp timings")
    status, reason = first_pass_status(RequestRecord.from_json(data), 100)
    assert status == BenchStatus.CACHED and "reused 95 of 100 prompt tokens" in reason
    # the chat template's opening (4 tokens here) is shared by every prompt: still a sample
    data["stats"]["prompt_cached_count"] = 4
    assert first_pass_status(RequestRecord.from_json(data), 100)[0] == BenchStatus.OK


def test_the_prefill_line_follows_the_server_and_never_starts_ttft():
    live = LiveRequest(RequestCollector("hi", {}, "m"))
    live.add(StreamEvent(5, progress=PromptProgress(2000, 120, 1024, 800.0)))
    assert live.first_text_ns is None and live.ttft_ms is None and live.waiting_for_prefill
    assert live.wait_text() == ("prefill 1,024/2,000 tokens (51%, 120 cached) in 800 ms "
                                "(the server's prompt_progress)")
    live.add(StreamEvent(9, "x"))
    assert live.wait_text() is None and live.first_text_ns == 9
    assert progress_text(PromptProgress(0, 0, 0, 0.0)).startswith("prefill 0/0 tokens (n/a")


async def test_the_log_says_which_request_had_to_open_a_connection():
    """A keep-alive server (the scripted one): the first request connects, the second reuses
    it. llama-server closes it after every stream, so there every request says True."""
    with ScriptedOpenAI("llama-server") as up:
        engine = OpenAIEngine(up.url)
        try:
            results = [await run_request(
                lambda: engine.stream_chat("llama-server", chat_messages("hi")),
                RequestCollector("hi", {}, "llama-server")) for _ in range(2)]
        finally:
            await engine.aclose()
    assert [r.new_connection for r in results] == [True, False]
    assert RequestRecord.of(results[1]).new_connection is False


def test_a_sweep_reads_llama_servers_slots_from_its_props():
    from llmtop.engines.connection import Connection
    from llmtop.sessions.runners.environment import engine_parallelism

    engine = OpenAIEngine("http://127.0.0.1:9")
    conn = Connection(engine=engine, model="m", info=None, version=None,
                      engine_config={"server": "llama-server", "total_slots": 4,
                                     "n_ctx_per_slot": 1024})
    assert engine_parallelism(conn) == {
        "slots": 4, "n_ctx_per_slot": 1024,
        "source": "llama-server's /props (total_slots: its --parallel)"}
    assert conn.engine_config_short == "llama-server: 4 slots × 1024 ctx"
