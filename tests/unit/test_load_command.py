"""`llmtop load` end to end through the CLI against the slotted server, and `llmtop report`
of its log."""

from __future__ import annotations

import asyncio
import json

import pytest

from llmtop.cli import main
from llmtop.exitcodes import ExitCode
from llmtop.testing.slotted import Service, SlottedProcess


@pytest.fixture(scope="module")
def slotted():
    up = SlottedProcess(Service(slots=2, prefill_s=0.01, tokens=5, gap_s=0.005))
    asyncio.run(up.start())
    yield up
    up.stop()


def verdict_rc(report: dict) -> ExitCode:
    """The exit code the sweep's verdict gives (load_verdict.py): 1 when a level ran NOISY
    (this shared machine's probes decide), else 0."""
    return ExitCode.NOISY if report["verdict"]["word"] == "contaminated" else ExitCode.OK


def load(url: str, log, *flags: str) -> int:
    """`llmtop load` on the slotted server with small prompts, printing JSON."""
    common = ["--engine", "ollama", "--host", url, "--model", "slotted", "--prompt-tokens", "20",
              "--max-tokens", "5", "--log", str(log), "--json", "--no-cache"]
    return main(["load", *common, *flags])


def test_load_prints_json_and_report_renders_its_log(slotted, tmp_path, capsys):
    log = tmp_path / "load.jsonl"
    rc = load(slotted.url, log, "--concurrency", "1,2", "--requests", "4", "--slo", "ttft=1s")
    report = json.loads(capsys.readouterr().out)
    assert rc == verdict_rc(report)
    assert [lv["value"] for lv in report["levels"]] == [1, 2]
    assert [lv["ok"] for lv in report["levels"]] == [4, 4]
    assert report["knee"]["value"] == 2  # every request meets TTFT ≤ 1 s
    assert main(["report", str(log), "--format", "md"]) == ExitCode.OK
    md = capsys.readouterr().out
    head = "Knee" if rc == ExitCode.OK else "Knee (not trusted: "
    assert f"**{head}" in md
    assert "** this engine serves 2 concurrent users within TTFT ≤ 1000 ms." in md
    assert "| 2 users | 4/0 |" in md


def test_open_loop_by_duration(slotted, tmp_path, capsys):
    rc = load(slotted.url, tmp_path / "l.jsonl", "--rate", "20", "--arrivals", "constant",
              "--duration", "0.3s")
    report = json.loads(capsys.readouterr().out)
    assert rc == verdict_rc(report)
    (level,) = report["levels"]
    assert level["requests"] == 6  # 20 req/s × 0.3 s
    assert level["lag_ms"]["n"] == 6


@pytest.mark.parametrize(
    "flags",
    [
        ["--concurrency", "1.5"],
        ["--rate", "0"],
        ["--slo", "p99=1s"],
        ["--concurrency", "1", "--rate", "1"],
        ["--requests", "0"],
        ["--requests", "3", "--duration", "5s"],
    ],
)
def test_bad_flags_are_usage_errors(flags, capsys):
    with pytest.raises(SystemExit) as exc:
        rc = main(["load", "--engine", "ollama", "--host", "127.0.0.1:9", *flags])
        raise SystemExit(rc)
    assert exc.value.code == ExitCode.USAGE


def test_search_through_the_cli_says_each_point_and_the_answer(slotted, tmp_path, capsys):
    # TTFT ≤ 1 s holds for every request of a 2-slot server with S = 30 ms, so both bounds
    # meet; 36 of 36 gives a Wilson low end of 36 / (36 + 1.96²) = 0.904 ≥ 0.90 in one batch.
    rc = load(slotted.url, tmp_path / "s.jsonl", "--concurrency", "1,4", "--requests", "36",
              "--slo", "ttft=1s", "--search")
    captured = capsys.readouterr()
    assert rc == verdict_rc(json.loads(captured.out))
    assert ("llmtop load: SLO search: the highest concurrency tried, 4 users, still meets "
            "TTFT ≤ 1000 ms (meets: 100% of 36 (95 % CI 90.4%–100.0%)): search higher") \
        in captured.err
    search = json.loads(captured.out)["search"]
    assert [(p["value"], p["outcome"]) for p in search["points"]] == [(1, "meets"), (4, "meets")]
    assert (search["answer"], search["above"]) == (4, None)
