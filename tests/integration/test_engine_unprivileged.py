"""Ollama as a system service, for real: a listener started as root, with a CPU-busy child
named like its runner, and llmtop run as an unprivileged user (uid 65534 through `setpriv`).

Linux hides who owns another user's socket (psutil gives `pid=None`), so llmtop must find the
engine through the socket's uid in /proc/net/tcp and the catalogue's engine names, count the
busy runner as the measured engine (not background), and say how it found it.

The fake engine is Python run through a symlink named `ollama` (a process's name is the name
it was executed under), answering /api/version and /api/ps; its child burns one core, the way
a runner does while generating. Skips where setpriv or root is missing, where uid 65534 cannot
import llmtop, and when the machine is NOISY for reasons of its own (other busy programs).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmtop.servers.child import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
ROOT = Path(__file__).resolve().parents[2]  # the checkout whose llmtop is tested
TRIES = 3

FAKE_OLLAMA = """
import http.server, json, signal, subprocess, sys
port, runner = int(sys.argv[1]), sys.argv[2]
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # so `finally` stops the runner
child = subprocess.Popen([runner, "-c", "while True: pass"])  # the busy runner, named ollama
REPLIES = {"/api/version": {"version": "0.0.0-fake"}, "/api/ps": {"models": []}}
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps(REPLIES.get(self.path, {})).encode()
        self.send_response(200 if self.path in REPLIES else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", port), Handler)
print(child.pid, flush=True)
try:
    server.serve_forever()
finally:
    child.kill()
"""


@pytest.fixture(scope="module")
def shared_dir() -> Iterator[Path]:
    """A directory every user can read (pytest's tmp_path is private to root)."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs Linux, root and setpriv to run llmtop as another user")
    path = Path(tempfile.mkdtemp(prefix="llmtop-unpriv-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def as_nobody(shared: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(ROOT),
        "HOME": str(shared),
        "XDG_CONFIG_HOME": str(shared / "config"),  # no user config: default thresholds
    }
    return subprocess.run(
        [*NOBODY, sys.executable, *args],
        capture_output=True, text=True, env=env, timeout=timeout, check=False, cwd=shared,
    )


@pytest.fixture(scope="module")
def engine(shared_dir: Path) -> Iterator[dict[str, Any]]:
    """The fake Ollama service, as root: host URL, server pid, runner pid."""
    probe = as_nobody(shared_dir, "-c", "import llmtop.probes.preflight, psutil")
    if probe.returncode != 0:
        pytest.skip(f"uid 65534 cannot import llmtop from {ROOT}: {probe.stderr.strip()[-300:]}")
    (shared_dir / "bin").mkdir()
    link = shared_dir / "bin" / "ollama"
    link.symlink_to(os.path.realpath(sys.executable))
    script = shared_dir / "fake_ollama.py"
    script.write_text(FAKE_OLLAMA)
    port = free_port()
    server = subprocess.Popen(
        [str(link), str(script), str(port), str(link)], stdout=subprocess.PIPE, text=True
    )
    runner = None
    try:
        assert server.stdout is not None
        runner = int(server.stdout.readline())
        host = f"http://127.0.0.1:{port}"
        _wait_listening(host)
        yield {"host": host, "server": server.pid, "runner": runner}
    finally:
        server.terminate()
        server.wait(timeout=10)
        if runner is not None:  # never leave a core-burning runner behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(runner, signal.SIGKILL)


def _wait_listening(host: str) -> None:
    import urllib.request

    deadline = time.monotonic() + 10
    while True:
        try:
            with urllib.request.urlopen(f"{host}/api/version", timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def summary(data: dict[str, Any]) -> str:
    return "; ".join(f"{f['level']} {f['code']}: {f['message']}" for f in data["findings"])


def test_identified_by_socket_user_with_how(shared_dir: Path, engine: dict[str, Any]) -> None:
    code = (
        "import json, sys; from llmtop.probes.engine_identity import identify_engine;"
        "print(json.dumps(identify_engine(sys.argv[1]).to_dict()))"
    )
    p = as_nobody(shared_dir, "-c", code, engine["host"])
    assert p.returncode == 0, p.stderr
    found = json.loads(p.stdout)
    pids = sorted({engine["server"], engine["runner"]})
    assert found["pids"] == pids and found["app"] == "Ollama"
    assert found["how"] == "socket user"
    assert found["notes"] == ["socket owner not visible to this user"]
    assert found["description"] == (
        f"engine: Ollama pids {pids[0]}, {pids[1]} — identified by the listening socket's user"
        " and engine names; socket owner not visible to this user"
    )


def test_preflight_as_nobody_is_quiet_and_counts_the_runner_as_the_engine(
    shared_dir: Path, engine: dict[str, Any]
) -> None:
    for _ in range(TRIES):
        p = as_nobody(
            shared_dir, "-m", "llmtop", "preflight", "--host", engine["host"], "--json",
            "--duration", "2",
        )
        assert p.returncode in (0, 1), p.stderr
        data = json.loads(p.stdout)
        assert data["engine"]["checked"] is True
        assert {engine["server"], engine["runner"]} <= set(data["engine"]["pids"])
        ollama = [a for a in data["apps"] if a["app"] == "Ollama"]
        assert [a["category"] for a in ollama] == ["measured engine"], data["apps"]
        # ~100 % of a core while generating; a loaded CI machine may give it less
        assert ollama[0]["cpu_percent_median"] > 30.0
        assert not any("inference engine" in f["remedy"] for f in data["findings"]), summary(data)
        # the only finding naming the engine says how it was identified (INFO), never noise
        named = [f for f in data["findings"] if "Ollama" in f["message"]]
        assert [(f["code"], f["level"]) for f in named] == [("engine-identified", "info")], \
            summary(data)
        assert "identified by the listening socket's user" in named[0]["message"]
        if p.returncode == 0:
            assert data["verdict"] == "QUIET"
            return
        time.sleep(1.0)
    pytest.skip(f"machine NOISY for other reasons (not the engine): {summary(data)}")
