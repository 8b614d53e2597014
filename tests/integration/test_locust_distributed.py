"""llmtop's Locust user class in Locust's distributed mode — a master and two workers as
local processes — against the slotted server, compared with `llmtop load` on the same
workload (4 closed-loop users on 4 slots, 16 requests, prompts of the same word count).

Expected agreement: the same totals (16 ok); TPOT is the server's token gap in both (within
TPOT_MS); TTFT and E2E medians within AGREE_MS. The clients differ (gevent + blocking httpx
vs asyncio + the ollama client), so each has its own few ms of round trip, and on the shared
2-core runner (load average ~15 while measured) one client's TTFT median moved by up to 30 ms
between identical runs (24–51 ms for a 20 ms prefill), hence 50 ms. As many slots as users: a
closed loop with queueing depends on when each user starts (Locust starts workers' users at
different moments, llmtop all at once), so only a queue-free workload is the same workload
for both; the queueing itself is tested in tests/unit/test_load_slotted.py.
"""

from __future__ import annotations

import asyncio
import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llmtop.connect import connect
from llmtop.servers.child import free_port
from llmtop.sessions.analysis.load import analyze_load
from llmtop.sessions.measure.config import LoadConfig
from llmtop.sessions.runners.load.runner import LoadRunner
from llmtop.testing.slotted import Service, SlottedProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
# Never import locust here: importing it monkey-patches this whole pytest process with gevent
# (sockets, threads, subprocess), and every later test would run on gevent's loop. Locust
# runs only in the master and worker processes this test starts.
if importlib.util.find_spec("locust") is None:
    pytest.skip("locust is not installed (the `load` extra)", allow_module_level=True)

SERVICE = Service(slots=4, prefill_s=0.02, tokens=9, gap_s=0.01)  # S = 100 ms
WORDS = 20
AGREE_MS = 50.0
TPOT_MS = 4.0  # the same stalls stretch a median decode by up to ~3 ms here
LOCUSTFILE = Path(__file__).parents[2] / "llmtop" / "loadtest" / "locustfile.py"


def locust(*args: str, log: Path) -> subprocess.Popen[bytes]:
    exe = shutil.which("locust", path=str(Path(sys.executable).parent)) or "locust"
    env = {**os.environ, "PYTHONPATH": str(LOCUSTFILE.parents[2])}
    with log.open("wb") as out:
        return subprocess.Popen(
            [exe, "-f", str(LOCUSTFILE), *args], stdout=out, stderr=subprocess.STDOUT, env=env
        )


async def llmtop_load(url: str, path: Path):
    conn = await connect("ollama", url, "slotted")
    try:
        config = LoadConfig(
            levels=(4,), requests=16, prompt_tokens=WORDS + 10, max_tokens=50, use_cache=False
        )
        return (await LoadRunner(conn, config, str(path)).run()).analysis
    finally:
        await conn.close()


def test_master_and_two_workers_agree_with_llmtop_load(tmp_path):
    up = SlottedProcess(SERVICE)
    asyncio.run(up.start())
    try:
        ours = asyncio.run(llmtop_load(up.url, tmp_path / "llmtop.jsonl")).levels[0]
        port = str(free_port())
        common = [
            "--headless",
            "--host",
            up.url,
            "--llmtop-model",
            "slotted",
            "--llmtop-prompt-words",
            str(WORDS),
            "--llmtop-max-tokens",
            "50",
        ]
        master = locust(
            *common,
            "--master",
            "--master-bind-port",
            port,
            "--expect-workers",
            "2",
            "-u",
            "4",
            "-r",
            "100",
            "--llmtop-requests-per-user",
            "4",
            "--llmtop-log",
            str(tmp_path / "locust.jsonl"),
            "-t",
            "120s",
            "--csv",
            str(tmp_path / "locust"),
            log=tmp_path / "master.log",
        )
        workers = [
            locust(*common, "--worker", "--master-port", port, log=tmp_path / f"worker{i}.log")
            for i in range(2)
        ]
        try:
            assert master.wait(180) == 0, (tmp_path / "master.log").read_text()[-2000:]
        finally:
            for w in workers:
                w.wait(30)
    finally:
        up.stop()
    theirs = analyze_load(tmp_path / "locust.jsonl").levels[0]
    clients = {json.loads(line).get("client") for line in (tmp_path / "locust.jsonl").open()} - {
        None
    }
    assert len(clients) == 2  # both workers sent records
    assert (theirs.requests, theirs.ok) == (ours.requests, ours.ok) == (16, 16)
    gap_ms = SERVICE.gap_s * 1000
    assert theirs.tpot.p50 == pytest.approx(gap_ms, abs=TPOT_MS)
    assert ours.tpot.p50 == pytest.approx(gap_ms, abs=TPOT_MS)
    assert theirs.ttft.p50 == pytest.approx(ours.ttft.p50, abs=AGREE_MS)
    assert theirs.e2e.p50 == pytest.approx(ours.e2e.p50, abs=AGREE_MS)
    # Locust's own statistics (its request events) count the same requests.
    with (tmp_path / "locust_stats.csv").open() as fh:
        rows = {row["Name"]: row for row in csv.DictReader(fh)}
    assert {name: int(rows[name]["Request Count"]) for name in ("TTFT", "TPOT", "E2E")} == {
        "TTFT": 16,
        "TPOT": 16,
        "E2E": 16,
    }
    assert int(rows["E2E"]["Failure Count"]) == 0
    # Locust rounds medians over 100 ms to 10 ms: compare within that.
    assert float(rows["E2E"]["Median Response Time"]) == pytest.approx(theirs.e2e.p50, abs=10)
