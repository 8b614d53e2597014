"""`llmtop engines` against real servers in processes of their own: the real embedded engine
(`llmtop engine`, llama.cpp and the bundled Gemma 3 270M) and the scripted OpenAI server
answering as llama-server, each on a free port named with `--ports`; and `llmtop run` with no
engine flags naming a `llmtop engine` on its usual port (11435) on stderr."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import httpx
import pytest

from llmtop import __version__
from llmtop.exitcodes import ExitCode
from llmtop.servers.child import free_port, port_problem
from tests.conftest import MODEL

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
USUAL = 11435  # `llmtop engine`'s default port, one of the usual ports `run` probes
START_S = 60.0  # the embedded engine's start: a first self-test runs two llama.cpp trials


def llmtop(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llmtop", *args], capture_output=True,
                          text=True, check=False, timeout=timeout)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def serving(argv: list[str], ready: str) -> Iterator[subprocess.Popen[bytes]]:
    """A server process, yielded once `ready` (a URL) answers 200; stopped afterwards."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + START_S
        while not _answers(ready):
            assert proc.poll() is None, f"{argv} ended with {proc.returncode}"
            assert time.monotonic() < deadline, f"{argv} did not answer {ready} in {START_S} s"
            time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def engine_at(port: int) -> AbstractContextManager[subprocess.Popen[bytes]]:
    """`llmtop engine --port PORT`, ready."""
    return serving([sys.executable, "-m", "llmtop", "engine", "--port", str(port)],
                   f"http://127.0.0.1:{port}/api/version")


@pytest.fixture(scope="module")
def user_engine() -> Iterator[tuple[int, int]]:
    """A user's `llmtop engine`, (port, pid): on its usual port 11435 when that is free
    (`run`'s check needs it there), else on a free one. One for the module: its start (a
    self-test, the model's load) is most of these tests' time."""
    port = USUAL if port_problem("127.0.0.1", USUAL) is None else free_port()
    with engine_at(port) as proc:
        yield port, proc.pid


def test_engines_lists_the_embedded_engine_and_llama_server(user_engine) -> None:
    engine_port, engine_pid = user_engine
    server_port = free_port()
    scripted = [sys.executable, "-m", "llmtop.testing.scripted_openai", "--port",
                str(server_port), "--kind", "llama-server"]
    with serving(scripted, f"http://127.0.0.1:{server_port}/v1/models"):
        p = llmtop("engines", "--json", "--ports", f"{engine_port},{server_port}")
    assert p.returncode == ExitCode.OK, p.stderr
    out = json.loads(p.stdout)
    by_port = {int(e["url"].rsplit(":", 1)[1]): e for e in out["engines"]}
    embedded, server = by_port[engine_port], by_port[server_port]
    # the embedded engine answers Ollama's API, marked "engine": "llmtop-embedded"
    assert (embedded["kind"], embedded["version"]) == ("llmtop-embedded", __version__)
    assert embedded["available"] == [MODEL] and embedded["model"] == MODEL
    assert embedded["flags"] == (f"--engine embedded --host http://127.0.0.1:{engine_port} "
                                 f"--model {MODEL}")
    # its socket's owner is the process started above (this test runs as a user who sees it)
    assert embedded["pid"] == engine_pid and embedded["process"] == "llmtop engine"
    # the scripted llama-server: /props' build_info, /v1/models' list (what it serves)
    assert (server["kind"], server["version"]) == ("llama-server", "b1-scripted")
    assert server["loaded"][0] == "llama-server" and server["available"] is None
    assert server["flags"] == (f"--engine openai --host http://127.0.0.1:{server_port}/v1 "
                               "--model llama-server")
    assert {engine_port, server_port} <= set(out["probed"])


def test_run_with_no_flags_names_the_other_engine_on_stderr(user_engine, tmp_path) -> None:
    usual = user_engine[0]
    if usual != USUAL:
        pytest.skip(f"port {USUAL} was taken here: the check needs the engine there")
    p = llmtop("run", "--prompt", "hi", "--num-predict", "2", "--log",
               str(tmp_path / "run.jsonl"))
    assert p.returncode == ExitCode.OK, p.stderr
    # with no flags, run keeps its rule (Ollama at 11434, else an embedded engine it starts
    # on a free port) and names the engine on 11435 with the flags that measure it
    named = (f"llmtop-embedded {__version__} at http://127.0.0.1:{usual} (--engine embedded "
             f"--host http://127.0.0.1:{usual} --model {MODEL})")
    lines = [x for x in p.stderr.splitlines() if x.startswith("# other engine")]
    assert len(lines) == 1 and named in lines[0], p.stderr  # one line, however many engines
    assert lines[0].endswith(" — `llmtop engines` lists them")
