"""The watch screen (tui/screens/watch.py): rows per request as they stream and finish, the
sparklines, the detail with its text hidden unless --show-text; and the whole app with the
real `llmtop watch --json --live` child in front of the scripted server."""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx
import ollama
from textual.widgets import DataTable, Static

from llmtop.servers.child import free_port
from llmtop.sessions.runners.watch.serving import Pair
from llmtop.testing.scripted import ScriptedUpstream, Timing
from llmtop.tui.state.watch_view import WatchRows, cells
from llmtop.tui.watch import WatchApp, child_argv
from llmtop.tui.widgets.spark_bars import SparkBars

PAIRS = [Pair("127.0.0.1", 11435, "http://127.0.0.1:11434")]
FINISHED = {"event": "finished", "id": 1, "caller": "Open WebUI", "model": "qwen3:4b",
            "status": "ok", "prompt_tokens": 3000, "cached_prompt_tokens": 2400,
            "cached_pct": 80.0, "ttft_ms": 412.4, "decode_tps": 31.25, "tpot_ms": 32.0,
            "content": "secret answer", "prompt": "secret prompt"}


def test_rows_follow_a_request_from_start_to_finish():
    rows = WatchRows()
    rows.apply({"event": "started", "id": 1})
    rows.apply({"event": "progress", "id": 1, "model": "qwen3:4b", "ttft_ms": 412.4,
                "live_tps": 28.0, "chunks": 10})
    assert cells(rows.rows[1]) == ("1", "?", "qwen3:4b", "–", "412 ms", "28.0", "–", "streaming")
    rows.apply(FINISHED)
    assert cells(rows.rows[1]) == ("1", "Open WebUI", "qwen3:4b", "3000", "412 ms", "31.2",
                                   "80 %", "ok")
    assert rows.ttft_ms == [412.4] and rows.decode_tps == [31.25]


async def test_the_screen_shows_rows_sparks_and_hides_the_text():
    app = WatchApp(None, PAIRS, show_text=False, probes=False)
    async with app.run_test(size=(140, 40)) as pilot:
        screen = app.screen_
        screen.take({"event": "started", "id": 1})
        screen.take(FINISHED)
        screen.take({**FINISHED, "id": 2, "ttft_ms": 90.0, "caller": "VS Code"})
        await pilot.pause(0.3)
        table = screen.query_one(DataTable)
        assert table.row_count == 2
        assert table.get_row("2")[1] == "VS Code"
        assert screen.query_one("#spark-ttft", SparkBars).data == (412.4, 90.0)
        detail = str(screen.query_one("#watch-detail", Static).render())
        assert "TTFT 412 ms" in detail and "secret" not in detail
        assert "--show-text" in detail


async def test_show_text_puts_the_text_in_the_detail():
    app = WatchApp(None, PAIRS, show_text=True, probes=False)
    async with app.run_test(size=(140, 40)) as pilot:
        app.screen_.take(FINISHED)
        await pilot.pause(0.3)
        widget = app.screen_.query_one("#watch-detail", Static)
        detail = str(widget.render())
        assert "secret prompt" in detail and "secret answer" in detail
        # and on the screen, not below the panel's edge (a new-user pass: a fixed 12 lines
        # cut the text lines off): every line fits inside the border
        assert widget.content_region.height >= len(detail.splitlines())
        # no probe samples in these tests (probes=False): the panel says so
        panel = app.screen_.query_one("#probes")
        assert str(panel.texts["verdict"]) == "probes off (--no-probes)"


async def test_the_app_runs_the_watch_and_shows_a_real_request(tmp_path):
    port = free_port()
    with ScriptedUpstream(Timing(first_s=0.02, chunks=4, gap_s=0.005)) as up:
        pairs = [Pair("127.0.0.1", port, up.url)]
        args = argparse.Namespace(log=str(tmp_path / "w.jsonl"), prometheus=None,
                                  token_file=None, log_bodies=False, show_text=False,
                                  sample_probes=False)
        app = WatchApp(child_argv(args, pairs), pairs, show_text=False, probes=False)
        async with app.run_test(size=(140, 40)) as pilot:
            client = ollama.Client(host=f"http://127.0.0.1:{port}")

            def ask() -> str:
                deadline = time.monotonic() + 30
                while True:  # until the child listens
                    try:
                        parts = client.chat(model="timed", messages=[
                            {"role": "user", "content": "hi"}], stream=True)
                        return "".join(p.message.content for p in parts)
                    except (ConnectionError, httpx.ConnectError):
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.2)

            assert await asyncio.to_thread(ask) == "t0 t1 t2 t3"
            rows = app.screen_.state.rows
            for _ in range(100):
                if rows.get(1, {}).get("status") == "ok":
                    break
                await pilot.pause(0.1)
            assert rows[1]["status"] == "ok" and rows[1]["model"] == "timed"
            assert rows[1]["output_tokens"] == 4
            await pilot.pause(0.3)
            assert app.screen_.query_one(DataTable).row_count == 1


async def test_the_watch_screens_probe_panel_scrolls_without_stray_bars():
    """The watch app draws its scrollbars as the main app does (LlmtopBaseApp): seen in tmux,
    its probe panel's 2-column scrollbar ended its thumb in "▃▃" beside an app's row. At
    140×16 a busy machine's findings and apps overflow the panel, which scrolls; its
    scrollbar is one cell wide and no cell of it holds a block glyph."""
    from textual.scrollbar import ScrollBar, ScrollBarRender

    from llmtop.probes.verdict import Finding, Level, Verdict
    from llmtop.tui.widgets.probe_panel import ProbePanel

    from .fakes import busy_apps, machine_sample, wait_for
    from .test_screen_sizes import BLOCKS, screen_cells

    ScrollBar.renderer = ScrollBarRender  # as a fresh process has it, whatever ran before
    findings = [Finding(f"f{i}", Level.WARN, 50.0, 10.0, "% CPU", f"program {i} is busy " * 3,
                        "close it") for i in range(6)]
    app = WatchApp(None, PAIRS, show_text=False, probes=False)
    # 16 lines: the verdict gives way to the apps (probe_panel._fitted_verdict), which still
    # overflow the panel
    async with app.run_test(size=(140, 16)) as pilot:
        app.screen_.show_probe(machine_sample(1, 80.0, busy_apps(), Verdict.of(findings), 2.0))
        panel = app.screen_.query_one(ProbePanel)
        # it overflows: the case that showed "▃▃" (laid out within a few frames; a busy
        # machine takes longer than any fixed pause)
        await wait_for(pilot, lambda: panel.show_vertical_scrollbar, what="the scrollbar")
        await pilot.pause()
        assert panel.styles.scrollbar_size_vertical == 1
        bar = panel.region.right - 1  # the scrollbar's one column, inside the border
        column = [ch for (x, y), ch in screen_cells(app).items()
                  if x in (bar - 1, bar) and panel.region.y < y < panel.region.bottom - 1]
        assert not BLOCKS & set(column), column


async def test_the_screen_warns_when_nothing_answers_at_the_upstream():
    dead = free_port()  # bound, then released: nothing listens there
    pairs = [Pair("127.0.0.1", 11436, f"http://127.0.0.1:{dead}")]
    app = WatchApp(None, pairs, show_text=False, probes=False)
    async with app.run_test(size=(140, 40)) as pilot:
        from .fakes import wait_for

        await wait_for(pilot, lambda: len(app._notifications) == 1, what="the warning")
        (note,) = list(app._notifications)
        assert note.severity == "warning" and f"http://127.0.0.1:{dead}" in note.message
