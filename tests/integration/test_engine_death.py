"""The embedded engine on the real model: the llama.cpp self-test on this machine, and an engine
child killed by a signal mid-request, named by `llmtop run` (so the crash path a CPU with a
broken AMX path takes is exercised on every machine, AMX or not)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import httpx
import psutil
import pytest

from llmtop.exitcodes import ExitCode
from llmtop.servers.embedded import llama_config as lc
from llmtop.servers.embedded.llama_backend import physical_cores
from llmtop.servers.embedded.model_files import bundled_model_path
from llmtop.sessions.records.log import read_log

pytestmark = pytest.mark.integration
WAIT_S = 180  # polling limits for a cold start (model assembly, the self-test); no timing asserted


def test_the_self_test_runs_both_configurations_for_real_and_keeps_one(tmp_path):
    model = str(bundled_model_path())
    choice = lc.choose(model, physical_cores(), forced="auto", cache=tmp_path / "c.json")
    # on a machine another program keeps busy (over 25 % of the CPU during the trials) the
    # rates are not compared: the choice is INCONCLUSIVE, says so, and is not cached (seen in
    # a full suite beside a neighbour's build); else it is the self-test's, cached
    assert choice.source in ("self-test", lc.INCONCLUSIVE), choice.source
    assert [t.config for t in choice.trials] == ["repack", "no-repack"]
    crashed = [t for t in choice.trials if not t.ok]
    ran = [t for t in choice.trials if t.ok]
    assert ran, choice.reason  # at least one configuration survives on any machine tests run on
    for t in ran:
        assert t.prefill_tps > 0 and t.decode_tps > 0 and t.signal is None
    kept = next(t for t in choice.trials if t.config == choice.config.name)
    assert kept.ok
    assert all(t.signal is not None or t.exit_code for t in crashed)
    if choice.source == lc.INCONCLUSIVE:
        assert lc.cached(model, tmp_path / "c.json") is None  # the next start tests again
    else:
        assert lc.cached(model, tmp_path / "c.json").config == choice.config


def test_the_engine_reports_its_configuration(engine_url):
    found = httpx.get(f"{engine_url}/api/version", timeout=10).json()["llama_config"]
    assert found["config"] in ("repack", "no-repack")
    assert found["use_extra_bufts"] is (found["config"] == "repack")
    state = "on" if found["use_extra_bufts"] else "off"
    assert found["reason"].startswith(f"llama.cpp repack {state}")
    # the threads a request without num_thread gets, as llama_backend.default_threads says
    from llmtop.servers.embedded.llama_backend import default_threads

    assert (found["threads"], found["threads_why"]) == (default_threads().threads,
                                                        default_threads().why)


def _engine_child(run: subprocess.Popen[str]) -> tuple[psutil.Process, int]:
    """The `llmtop engine` child of a `llmtop run`, and its port, once it answers."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for child in psutil.Process(run.pid).children():
            cmd = child.cmdline()
            if "engine" in cmd and "--port" in cmd:
                port = int(cmd[cmd.index("--port") + 1])
                try:
                    httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                    return child, port
                except httpx.HTTPError:
                    pass
        assert run.poll() is None, run.communicate()
        time.sleep(0.1)
    raise AssertionError("no engine child answered")


def _wait_until_generating(port: int) -> None:
    """/api/ps lists the model once the request loaded it: the generation is under way."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if httpx.get(f"http://127.0.0.1:{port}/api/ps", timeout=5).json()["models"]:
            return
        time.sleep(0.05)
    raise AssertionError("the request never loaded the model")


@pytest.mark.parametrize("signum", [signal.SIGILL, signal.SIGKILL])
def test_run_names_an_engine_killed_mid_request(tmp_path, signum):
    log = tmp_path / "run.jsonl"
    run = subprocess.Popen(
        [sys.executable, "-m", "llmtop", "run", "--engine", "embedded", "--prompt",
         "Tell me a very long story about the sea.", "--num-predict", "2000", "--log", str(log)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        engine, port = _engine_child(run)
        _wait_until_generating(port)
        os.kill(engine.pid, signum)
        _, err = run.communicate(timeout=WAIT_S)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == ExitCode.REQUEST_FAILED, err
    name = {signal.SIGILL: "SIGILL (illegal instruction)", signal.SIGKILL: "SIGKILL (killed)"}
    said = re.search(rf"the embedded engine \(pid {engine.pid}\) was killed by "
                     rf"{re.escape(name[signum])} (after [0-9.]+ s of streaming \(\d+ chunks?\)|"
                     rf"before the first chunk, [0-9.]+ s after the request was sent); the last "
                     rf"lines of its log (\S+engine-{port}\.log): ", err)
    assert said, err
    assert os.path.exists(said.group(2))
    if signum == signal.SIGILL:
        assert "this CPU refused" in err and "`llmtop --version -v`" in err
    else:
        size = os.path.getsize(bundled_model_path()) / 2**30
        assert f"out-of-memory killer (see `dmesg`): the model file is {size:.2f} GiB" in err
    # the session log keeps the request, with the same words
    records = read_log(str(log)).requests
    assert len(records) == 1 and records[0].status == "error"
    assert f"was killed by {name[signum]}" in records[0].error


def test_llama_config_module_runs_one_trial_as_the_engine_does():
    p = subprocess.run(lc.trial_command(lc.NO_REPACK, str(bundled_model_path()), 1),
                       capture_output=True, text=True, timeout=WAIT_S, check=False)
    assert p.returncode == 0, p.stderr
    rates = json.loads(p.stdout.strip().splitlines()[-1])
    assert rates["prefill_tps"] > 0 and rates["decode_tps"] > 0
