"""`llmtop preflight` command: output, JSON, engine branch and exit codes (sampling faked)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmtop.cli import build_parser
from llmtop.commands import preflight as command
from llmtop.probes import config
from llmtop.probes.catalogue import Category
from llmtop.probes.gpu import GpuSample
from llmtop.probes.processes import AppUsage, ProcessSample
from llmtop.probes.sampler import ProbeSample
from llmtop.probes.system import SystemSample
from llmtop.probes.verdict import Finding, Level, Verdict
from llmtop.servers.child import free_port
from llmtop.testing.scripted import ScriptedUpstream

SYS = SystemSample(5.0, (5.0, 5.0), 0.1, 1000, 900, 10.0, 0, 0, 0.0, None, None, None, 2)


def window(busy: float = 0.5) -> list[ProbeSample]:
    apps = (AppUsage("bash", Category.OTHER, busy, 100, 1, (1,), False),)
    procs = ProcessSample(apps, 1.0, None, False, 1, 2)
    gpu = GpuSample(available=False, reason="none")
    return [ProbeSample(0, "t", SYS, procs, gpu, Verdict.of([]), 0.1)] * 2


@pytest.fixture(autouse=True)
def _fixed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """No real sampling (a fixed quiet window), no user config file."""
    calls: dict[str, Any] = {"busy": 0.5}

    def fake_collect(
        duration_s: float, interval_s: float, engine_pids: Any = None, **_: Any
    ) -> Any:
        calls.update(duration_s=duration_s, interval_s=interval_s, engine_pids=engine_pids)
        return window(calls["busy"]), duration_s

    monkeypatch.setattr("llmtop.probes.preflight.collect_samples", fake_collect)
    monkeypatch.delenv(config.ENV_VAR, raising=False)
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    monkeypatch.setattr(config.platformdirs, "user_config_dir", lambda app: str(tmp_path / app))
    return calls


def args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["preflight", *argv])


CLOSED = f"http://127.0.0.1:{free_port()}"  # nothing listens there


def test_quiet_text_without_engine(
    capsys: pytest.CaptureFixture[str], _fixed: dict[str, Any]
) -> None:
    assert command.main(args("--host", CLOSED, "--duration", "1")) == 0
    out = capsys.readouterr().out.splitlines()
    assert (
        out[0]
        == "QUIET  (2 samples over 1.0 s, every 0.5 s); background CPU 4 % of the machine "
        "(median; 4 % in every sample)"
    )
    # background: 5 % machine − 1 % of one core / 2 CPUs = 4.5 → shown as 4 (round half even)
    assert out[1] == "  no findings"
    # window(): bash is one process, pid 1: its pid is shown (PIDS_SHOWN)
    assert out[2] == "busiest apps (median CPU, % of one core): bash (pid 1) 0 %"
    assert out[3] == f"engine: no engine checked (no engine answers at {CLOSED})"
    assert out[4].startswith("thresholds: defaults (no ") and out[4].endswith("config.toml)")
    assert out[5].startswith("machine speed: canary ")  # probes/canary.py, vs the last bench
    assert (
        _fixed["duration_s"] == 1.0
        and _fixed["interval_s"] == 0.5
        and _fixed["engine_pids"] == set()
    )


def test_noisy_text_shows_value_threshold_and_remedy(
    capsys: pytest.CaptureFixture[str], _fixed: dict[str, Any]
) -> None:
    _fixed["busy"] = 38.0
    assert command.main(args("--host", CLOSED)) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("NOISY  (2 samples over 3.0 s")
    assert out[1:4] == [
        "  WARN  app-busy: bash is using 38 % CPU",
        "        measured 38 % CPU, threshold 10 % CPU",
        "        remedy: close or pause it while measuring",
    ]


def test_json_is_one_object(capsys: pytest.CaptureFixture[str]) -> None:
    assert command.main(args("--host", CLOSED, "--json")) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "QUIET" and data["exit_code"] == 0 and data["findings"] == []
    assert data["engine"] == {
        "checked": False, "host": CLOSED, "version": None, "model": None,
        "reason": f"no engine answers at {CLOSED}",
    }
    assert data["config"]["loaded"] is False


def test_config_error_exits_2_with_the_reason(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[thresholds]\nfoo = 1\n")
    monkeypatch.setenv(config.ENV_VAR, str(bad))
    assert command.main(args("--host", CLOSED)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"llmtop preflight: config error: {bad}: [thresholds] foo: unknown key")
    assert command.main(args("--host", CLOSED, "--json")) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "CANNOT CHECK" and data["exit_code"] == 2
    assert "foo: unknown key" in data["error"]


def test_config_file_is_used(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                             tmp_path: Path, _fixed: dict[str, Any]) -> None:
    good = tmp_path / "good.toml"
    good.write_text("[thresholds]\napp_cpu_warn = 50\n")
    monkeypatch.setenv(config.ENV_VAR, str(good))
    _fixed["busy"] = 38.0
    assert command.main(args("--host", CLOSED)) == 0  # 38 ≤ 50
    assert capsys.readouterr().out.splitlines()[-2] == f"thresholds: from {good}"


def test_bad_duration_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert command.main(args("--host", CLOSED, "--duration", "0")) == 2
    assert capsys.readouterr().err == "llmtop preflight: --duration must be > 0 seconds, got 0.0\n"


@pytest.fixture
def two_models() -> Iterator[str]:
    ps = {
        "models": [
            {
                "name": "qwen2.5:7b",
                "model": "qwen2.5:7b",
                "size": 5_000_000_000,
                "size_vram": 5_000_000_000,
            },
            {
                "name": "llama3:8b",
                "model": "llama3:8b",
                "size": 4_900_000_000,
                "size_vram": 4_900_000_000,
            },
        ]
    }
    with ScriptedUpstream(ps=ps) as upstream:
        yield upstream.url


def test_engine_findings_are_added(capsys: pytest.CaptureFixture[str], two_models: str) -> None:
    code = command.main(args("--host", two_models, "--model", "qwen2.5:7b", "--json"))
    assert code == 1  # the machine is quiet; the other loaded model makes it NOISY
    data = json.loads(capsys.readouterr().out)
    assert [(f["code"], f["level"]) for f in data["findings"]] == [
        ("other-models-loaded", "warn"), ("engine-identified", "info"), ("model-loaded", "info")
    ]
    assert data["engine"]["checked"] is True and data["engine"]["version"] == "0.0.0-scripted"
    assert data["engine"]["source"] == "/api/ps"
    # the scripted server runs inside this test process: the listening socket's owner is us
    assert os.getpid() in data["engine"]["pids"]
    assert data["engine"]["identity"]["how"] == "socket owner"


def test_engine_text_mentions_the_check(
    capsys: pytest.CaptureFixture[str], two_models: str
) -> None:
    assert command.main(args("--host", two_models, "--model", "qwen2.5:7b")) == 1
    out = capsys.readouterr().out
    assert (
        f"engine: {two_models} (version 0.0.0-scripted), loaded models from /api/ps, measured "
        "model qwen2.5:7b"
        in out
    )
    assert (
        "  WARN  other-models-loaded: 1 model is loaded besides qwen2.5:7b: llama3:8b (4.9 GB, 100 "
        "% in VRAM)"
        in out
    )
    assert "        measured 4.9 GB loaded, threshold 0 GB loaded" in out


def test_engine_whose_ps_fails_cannot_check(capsys: pytest.CaptureFixture[str]) -> None:
    with ScriptedUpstream(ps_error="boom") as upstream:
        url = upstream.url
        assert command.main(args("--host", url, "--json")) == 2
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["verdict"] == "CANNOT CHECK"
    assert data["error"].startswith(
        f"could not check the engine: cannot read /api/ps at {url} (ResponseError"
    )
    energy, error = captured.err.splitlines()  # the energy sources line, once, then the error
    assert energy.startswith("llmtop preflight: energy: ")
    assert error.startswith("llmtop preflight: could not check the engine: ")


def test_format_finding_without_numbers() -> None:
    f = Finding("on-battery", Level.WARN, None, None, "", "on battery", "plug in")
    assert command.format_finding(f) == [
        "  WARN  on-battery: on battery",
        "        remedy: plug in",
    ]
    g = dataclasses.replace(f, value=12.5, threshold=None, unit="% CPU")
    assert command.format_finding(g)[1] == "        measured 12.5 % CPU"


def test_the_band_the_median_hides_is_said() -> None:
    # finding J: a median alone hid how the background moved; 8.5 rounds half-even to 8
    assert command._band_words((8.5, 38.0)) == "; 8–38 % sample to sample"
    assert command._band_words(None) == ""
