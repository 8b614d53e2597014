"""On a machine with no readable energy source (no RAPL, no GPU, no battery: this one's
discovery, made from empty fake trees so the test reads the same everywhere) every measuring
command says "energy: n/a — no readable source (…)" once, on stderr, and its results carry
no energy figure (issue 26's done-when)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmtop import cli
from llmtop.probes.energy import NA_PREFIX, describe_sources, discover_sources
from llmtop.sessions.runners.energy import local_meter, remote_line
from llmtop.testing.scripted import ScriptedUpstream
from llmtop.testing.slotted import MODEL, Service, SlottedUpstream


class NoGpu:
    class NVMLError(Exception):
        pass

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 0


@pytest.fixture
def bare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Discovery finds nothing readable; returns the line every command must print."""
    found = discover_sources(
        tmp_path / "powercap", tmp_path / "ps", nvml_lib=NoGpu(), platform="linux"
    )
    monkeypatch.setattr("llmtop.sessions.runners.energy.discover_sources", lambda: found)
    line = describe_sources(found).line
    assert line.startswith(f"{NA_PREFIX} (")
    return line


def energy_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "energy" in line]


def test_run_says_na_once_and_its_json_is_unchanged(
    bare: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ScriptedUpstream() as up:
        assert (
            cli.main(
                [
                    "--host",
                    up.url,
                    "run",
                    "--model",
                    "ok",
                    "--prompt",
                    "hi",
                    "--log",
                    str(tmp_path / "a.jsonl"),
                ]
            )
            == 0
        )
        text = capsys.readouterr()
        assert (
            cli.main(
                [
                    "--host",
                    up.url,
                    "run",
                    "--model",
                    "ok",
                    "--prompt",
                    "hi",
                    "--json",
                    "--log",
                    str(tmp_path / "b.jsonl"),
                ]
            )
            == 0
        )
        as_json = capsys.readouterr()
    assert energy_lines(text.err) == [f"# {bare}"] and "energy" not in text.out
    assert energy_lines(as_json.err) == [f"# {bare}"]
    assert "energy" not in json.loads(as_json.out)


def test_bench_says_na_once_and_its_report_says_why(
    bare: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with SlottedUpstream(Service(slots=1, prefill_s=0.01, tokens=4, gap_s=0.005)) as up:
        code = cli.main(
            [
                "--host",
                up.url,
                "bench",
                "--model",
                MODEL,
                "--requests",
                "2",
                "--warmup",
                "0",
                "--prompt-tokens",
                "30",
                "--max-tokens",
                "4",
                "--num-ctx",
                "2048",
                "--no-cache",
                "--preflight-duration",
                "0.2",
                "--log",
                str(tmp_path / "bench.jsonl"),
            ]
        )
    out = capsys.readouterr()
    assert code in (0, 1)  # clean/inconclusive, or the busy test machine made it NOISY
    assert energy_lines(out.err) == [f"llmtop bench: {bare}"]
    section = out.out[out.out.index("## Energy") :].split("\n## ", 1)[0]
    assert section.split() == ["##", "Energy", *bare.split()]


def test_load_says_na_once(bare: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with SlottedUpstream(Service(slots=1, prefill_s=0.01, tokens=4, gap_s=0.005)) as up:
        code = cli.main(
            [
                "--host",
                up.url,
                "load",
                "--model",
                MODEL,
                "--concurrency",
                "1",
                "--requests",
                "2",
                "--prompt-tokens",
                "30",
                "--max-tokens",
                "4",
                "--num-ctx",
                "2048",
                "--no-cache",
                "--json",
                "--log",
                str(tmp_path / "load.jsonl"),
            ]
        )
    out = capsys.readouterr()
    assert code == 0, out.err
    assert energy_lines(out.err) == [f"llmtop load: {bare}"]
    assert json.loads(out.out)["energy"] == {"line": bare, "readable": False, "sources": []}


def test_preflight_says_na_once_and_gives_no_idle_power(
    bare: str, capsys: pytest.CaptureFixture[str]
) -> None:
    closed = "http://127.0.0.1:9"  # discard port: no engine answers
    code = cli.main(["preflight", "--duration", "0.5", "--host", closed, "--json"])
    out = capsys.readouterr()
    assert code in (0, 1)
    assert energy_lines(out.err) == [f"llmtop preflight: {bare}"]
    assert "idle_power" not in json.loads(out.out)


def test_an_engine_on_another_machine_is_not_metered_here() -> None:
    host = "http://192.0.2.1:11434"  # TEST-NET-1: never this machine
    meter = local_meter(host)
    assert not meter.active and meter.line == remote_line(host)
    assert meter.line == (
        "energy: n/a — the engine at http://192.0.2.1:11434 runs on another "
        "machine, and energy is read on this machine only"
    )
    assert meter.sources_record().sources == ()  # this machine's sources not looked for
