"""`llmtop run` sends its request only after the first probe sample has been recorded: that
sample identifies every process (tens of ms of CPU) and, taken while the request waits for
its first token, would delay the stamps (commands/run.py, FIRST_SAMPLE_WAIT_S)."""

from __future__ import annotations

import os
import subprocess
import sys

from llmtop.sessions.records.log import read_log
from llmtop.testing.scripted import ScriptedUpstream


def test_the_first_probe_sample_is_logged_before_the_request(tmp_path) -> None:
    log = tmp_path / "s.jsonl"
    with ScriptedUpstream() as engine:
        p = subprocess.run(
            [sys.executable, "-m", "llmtop", "--host", engine.url, "run", "--model", "ok",
             "--prompt", "hi", "--json", "--log", str(log)],
            capture_output=True, text=True, check=False, timeout=60, env=dict(os.environ),
        )
    assert p.returncode == 0, p.stderr
    run = read_log(log)
    assert len(run.requests) == 1 and run.probes
    # a probe record names the request it overlapped: the first one overlapped none
    assert run.probes[0].request_id is None
