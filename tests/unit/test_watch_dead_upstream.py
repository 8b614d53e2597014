"""A watch started in front of an address nothing answers at says so at once, naming the
address, what the user's requests will get (the watch's 502) and what to do; in front of a
listening engine it says nothing."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

from llmtop.servers.child import free_port
from llmtop.sessions.runners.watch.serving import Pair, silent_upstream


def test_an_upstream_that_refuses_is_named_and_one_that_listens_is_not():
    dead = free_port()  # bound, then released: nothing listens there
    said = silent_upstream(Pair("127.0.0.1", 11436, f"http://127.0.0.1:{dead}"))
    assert said is not None
    assert f"http://127.0.0.1:{dead}" in said and "connection refused" in said
    assert "http://127.0.0.1:11436 get a 502" in said and "llmtop engines" in said
    with socket.create_server(("127.0.0.1", 0)) as live:
        port = live.getsockname()[1]
        assert silent_upstream(Pair("127.0.0.1", 11436, f"http://127.0.0.1:{port}")) is None


def test_the_headless_watch_warns_before_it_serves(tmp_path):
    dead, listen = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmtop", "watch", "--json", "--no-probes",
         "--listen", f"127.0.0.1:{listen}", "--upstream", f"http://127.0.0.1:{dead}",
         "--log", str(tmp_path / "w.jsonl")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:  # the warning comes before "logging to"
            lines.append(line)
            if "logging to" in line:
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    warned = [ln for ln in lines if "warning: nothing answers at" in ln]
    assert len(warned) == 1 and f"http://127.0.0.1:{dead}" in warned[0]
