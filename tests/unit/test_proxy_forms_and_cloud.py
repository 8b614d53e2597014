"""The real CLI in a subprocess against the scripted Ollama server on 127.0.0.1: every form of
proxy variable gives a working run (a loopback engine is never proxied, and the `ollama`
package's import-time client never sees them) or one clear line, never a traceback; and a
cloud model is said to run on ollama.com in run's output, the log's header and the report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from llmtop.testing.scripted import CLOUD, ScriptedUpstream

# nothing listens on port 9 (discard): a proxy there would fail every request sent to it
SOCKS = "socks5://127.0.0.1:9"
PROXY_FORMS = [
    {"ALL_PROXY": SOCKS},
    {"all_proxy": SOCKS},
    {"HTTPS_PROXY": "socks5h://127.0.0.1:9", "HTTP_PROXY": "socks5h://127.0.0.1:9"},
    {"https_proxy": "socks5h://127.0.0.1:9", "http_proxy": SOCKS, "no_proxy": "example.org"},
    {"HTTP_PROXY": "http://127.0.0.1:9", "ALL_PROXY": "socks4://127.0.0.1:9"},
]
PROXY_NAMES = ("ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY",
               "http_proxy", "NO_PROXY", "no_proxy")


def llmtop(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llmtop", *argv], capture_output=True,
                          text=True, check=False, timeout=60, env=env)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PROXY_NAMES}
    return {**env, **extra}


@pytest.fixture(scope="module")
def engine():
    with ScriptedUpstream(also_installed=(CLOUD,)) as up:
        yield up


@pytest.mark.parametrize("proxies", PROXY_FORMS, ids=lambda p: "+".join(p))
def test_every_proxy_form_gives_a_working_run_against_a_loopback_engine(
        engine, tmp_path, proxies: dict[str, str]) -> None:
    # before: ALL_PROXY=socks5://… ended `llmtop run` with "ImportError: Using SOCKS proxy,
    # but the 'socksio' package is not installed" (the ollama package's import-time client)
    p = llmtop("--host", engine.url, "run", "--model", "ok", "--prompt", "hi", "--json",
               "--log", str(tmp_path / "s.jsonl"), env=clean_env(**proxies))
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert (out["text"], out["host"], out["status"]) == ("Hello!", engine.url, "ok")


def test_a_socks_proxy_for_a_remote_engine_is_one_clear_line(tmp_path) -> None:
    # 192.0.2.1 (TEST-NET-1) is not loopback: the proxy applies, and without the socksio
    # package httpx cannot use it — said in one line naming the variable, before any request
    pytest.importorskip("httpx")
    import importlib.util
    if importlib.util.find_spec("socksio") is not None:
        pytest.skip("socksio is installed: a SOCKS proxy is usable here")
    p = llmtop("--host", "http://192.0.2.1:11434", "run", "--engine", "ollama", "--prompt",
               "hi", "--log", str(tmp_path / "s.jsonl"), env=clean_env(ALL_PROXY=SOCKS))
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 2
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("llmtop: ALL_PROXY='socks5://127.0.0.1:9' cannot be used: a SOCKS "
                           "proxy needs the socksio package")


def test_a_socks4_proxy_for_a_remote_engine_is_one_clear_line(tmp_path) -> None:
    # httpx speaks SOCKS5 only: socks4 would be a ValueError deep inside the client
    p = llmtop("--host", "http://192.0.2.1:11434", "run", "--engine", "ollama", "--prompt",
               "hi", "--log", str(tmp_path / "s.jsonl"),
               env=clean_env(ALL_PROXY="socks4://127.0.0.1:9"))
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 2
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("llmtop: ALL_PROXY='socks4://127.0.0.1:9' cannot be used: httpx "
                           "speaks SOCKS5 only, not 'socks4'")


def test_a_cloud_model_is_said_to_run_on_ollama_com(engine, tmp_path) -> None:
    log = tmp_path / "cloud.jsonl"
    p = llmtop("--host", engine.url, "run", "--model", CLOUD, "--prompt", "hi", "--log",
               str(log), env=clean_env())
    assert p.returncode == 0, p.stderr
    said = ("the model runs on ollama.com, not on this machine (remote: TTFT and E2E include "
            "the network to ollama.com, and this machine's probes do not describe the machine "
            "that ran it)")
    assert f"# {said}" in p.stderr.splitlines()
    assert f"remote        {said}" in p.stdout.splitlines()
    header = json.loads(log.read_text().splitlines()[0])
    assert header["model"] == CLOUD and header["model_details"]["remote"] == "ollama.com"
    report = llmtop("report", str(log), env=clean_env())
    assert report.returncode == 0, report.stderr
    assert "runs on ollama.com, not on the machine below" in report.stdout


def test_a_local_model_has_no_remote_line(engine, tmp_path) -> None:
    log = tmp_path / "local.jsonl"
    p = llmtop("--host", engine.url, "run", "--model", "ok", "--prompt", "hi", "--json",
               "--log", str(log), env=clean_env())
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["remote"] is None
    assert "remote" not in json.loads(log.read_text().splitlines()[0])["model_details"]
