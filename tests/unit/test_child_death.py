"""A child server of llmtop's that dies is named: which one, which signal, its log, a remedy
(llmtop/servers/child.py). The children here are real processes killed by real signals."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import pytest

from llmtop.engines.base import EngineError
from llmtop.engines.events import Failure, FailureKind
from llmtop.engines.http import StreamProgress
from llmtop.servers.child import ChildServer, EmbeddedProcess, autopsy


class FileServer(ChildServer):
    """Python's http.server as a child server (GET / answers 200 with a listing)."""

    label = "test server"
    log_name = "test-server"

    def __init__(self, folder, code: str | None = None) -> None:
        super().__init__()
        self.folder = folder
        self.code = code

    def args(self) -> list[str]:
        return ["http.server"]

    def command(self) -> list[str]:
        if self.code is not None:
            return [sys.executable, "-c", self.code]
        code = ("import runpy, sys; print('serving files', flush=True); "
                "sys.argv[0] = 'http.server'; runpy.run_module('http.server', run_name='__main__')")
        return [sys.executable, "-u", "-c", code,
                str(self.port), "--bind", "127.0.0.1", "--directory", str(self.folder)]


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    child = FileServer(tmp_path)
    asyncio.run(child.start(timeout_s=30))
    yield child
    child.stop()


def test_a_child_killed_by_a_signal_is_named_with_its_log(server):
    pid = server.pid
    os.kill(pid, signal.SIGSEGV)
    death = server.death(wait_s=10)
    assert death is not None and (death.pid, death.signal) == (pid, signal.SIGSEGV)
    assert death.how() == "was killed by SIGSEGV (segmentation fault)"
    lines = [x for x in server.log_path.read_text().splitlines() if x.strip()]
    assert lines[0] == "serving files" and death.tail == tuple(lines[-5:])
    failure = server.death_failure(death, "after 1.50 s of streaming (3 chunks)")
    assert failure.kind == FailureKind.SERVER_ERROR
    assert failure.message.startswith(
        f"the test server (pid {pid}) was killed by SIGSEGV (segmentation fault) after 1.50 s "
        f"of streaming (3 chunks); the last lines of its log {server.log_path}: "
        + " | ".join(lines[-5:]))
    assert failure.remedy == ("a crash inside the test server: please report it with the output "
                              f"of `llmtop --version -v` and {server.log_path}")


def test_a_child_llmtop_stopped_or_one_still_running_has_no_death(server):
    assert server.death(wait_s=0) is None
    server.stop()
    assert server.death(wait_s=0) is None  # llmtop's own SIGTERM is no crash


def test_autopsy_replaces_a_broken_stream_by_the_death_and_leaves_others(server):
    broken = Failure(FailureKind.TRUNCATED, "the connection broke", "check its log")
    refused = Failure(FailureKind.BAD_REQUEST, "refused", "fix it")
    explain = autopsy([server])
    assert asyncio.run(explain(refused, "")) is refused  # alive: unchanged
    os.kill(server.pid, signal.SIGKILL)
    named = asyncio.run(explain(broken, "after 0.20 s of streaming (1 chunk)"))
    assert "was killed by SIGKILL" in named.message and "after 0.20 s" in named.message
    assert named.remedy.startswith("SIGKILL is usually the kernel's out-of-memory killer")


def test_a_child_that_dies_while_starting_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    child = FileServer(tmp_path, code="import os, signal; print('boot', flush=True); "
                                      "os.kill(os.getpid(), signal.SIGABRT)")
    with pytest.raises(EngineError) as err:
        asyncio.run(child.start(timeout_s=30))
    failure = err.value.failure
    assert failure.kind == FailureKind.UNREACHABLE  # exit 3: the engine did not start
    assert failure.message.startswith(f"the test server (pid {child.proc.pid}) was killed by "
                                      "SIGABRT (aborted) while starting; the last lines of its "
                                      f"log {child.log_path}: boot")


def test_the_embedded_engine_remedy_fits_the_signal(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    model = tmp_path / "big.gguf"
    with model.open("wb") as fh:
        fh.truncate(3 * 2**30 // 2)  # a sparse 1.50 GiB file
    engine = EmbeddedProcess(model_path=str(model))
    from llmtop.servers.child import Death

    def death(signum):
        return Death("embedded engine", 42, -signum, signum, engine.log_path, (), 1.0)

    oom = engine.death_remedy(death(signal.SIGKILL))
    assert oom.startswith("SIGKILL is usually the kernel's out-of-memory killer (see `dmesg`): "
                          "the model file is 1.50 GiB, ")
    ill = engine.death_remedy(death(signal.SIGILL))
    assert "AMX/repack path" in ill and "LLMTOP_LLAMA_REPACK=off" in ill
    engine.llama_config = {"use_extra_bufts": False, "trials": [
        {"config": "repack", "ok": False, "signal": 4, "exit_code": -4},
        {"config": "no-repack", "ok": True, "prefill_tps": 400.0, "decode_tps": 35.0}]}
    ill = engine.death_remedy(death(signal.SIGILL))
    assert ill.startswith("llama.cpp ran an instruction this CPU refused, with repacking and "
                          "AMX already off (its self-test here: repack: killed by SIGILL "
                          "(illegal instruction); no-repack: 35.0 tok/s decode, 400 tok/s "
                          "prefill): llmtop has no safer configuration to try; report it")


def test_stream_progress_words():
    p = StreamProgress()
    p.t_sent = 0
    assert p.words(1_200_000_000) == ("before the first chunk, 1.20 s after the request was "
                                      "sent")
    p.saw(1_000_000_000)
    assert p.words(1_500_000_000) == "after 0.50 s of streaming (1 chunk)"
    for t in range(40):
        p.saw(1_000_000_000 + t)
    # 41 chunks; first at 1.00 s, failed at 4.21 s: 3.21 s of streaming
    assert p.words(4_210_000_000) == "after 3.21 s of streaming (41 chunks)"
