"""The offload verdict through `llmtop bench`: a scripted Ollama whose /api/ps puts the whole
model in VRAM, a busy process standing for its runner (--engine-pid), and this machine, which
shows no GPU (no NVML library, no DRM card): the bench's JSON has the finding `offload` and
its markdown report (`llmtop report` on the log) the section, with the runner's CPU read
from the log's own probe samples."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from llmtop.sessions.records.log import read_log
from llmtop.testing.scripted import ScriptedUpstream, Timing

ROOT = Path(__file__).resolve().parents[2]
PS = {"models": [{"name": "timed", "model": "timed", "size": 4_000_000_000,
                  "size_vram": 4_000_000_000, "digest": "d",
                  "expires_at": "2026-12-06T10:00:00Z", "details": {}}]}


def _llmtop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llmtop", *args],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux probe run")
def test_bench_names_the_offload_mismatch(tmp_path: Path) -> None:
    if Path("/sys/class/drm").exists() and any(Path("/sys/class/drm").glob("card*")):
        pytest.skip("this machine has a DRM card: the no-GPU case cannot be made here")
    data = tmp_path / "prompts.jsonl"  # fixed prompts: no calibration against the script
    data.write_text("".join(json.dumps({"prompt": f"question {i}"}) + "\n" for i in range(3)))
    log = tmp_path / "bench.jsonl"
    runner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        # each request streams for about 1.9 s (0.1 s, then 30 chunks 0.06 s apart)
        with ScriptedUpstream(Timing(first_s=0.1, chunks=30, gap_s=0.06), ps=PS) as up:
            done = _llmtop("--engine", "ollama", "--host", up.url, "--model", "timed",
                           "--engine-pid", str(runner.pid), "bench", "--json",
                           "--dataset", str(data), "--max-tokens", "30",
                           "--preflight-duration", "0.2", "--no-remeasure",
                           "--no-save-curve", "--log", str(log))
    finally:
        runner.kill()
        runner.wait()
    assert done.returncode in (0, 1), done.stderr  # 1: this shared machine made it NOISY
    offload = json.loads(done.stdout)["offload"]
    assert offload is not None, done.stderr
    assert (offload["code"], offload["level"], offload["unit"]) == (
        "offload-mismatch", "fail", "cores")
    # the runner's CPU, from the log: the measured engine's apps in each sample taken during
    # a measured request (its first, warming-up sample has no CPU figure), median, in cores
    run = read_log(log)
    measured = {r.id for r in run.requests if r.phase == "measure" and r.status == "ok"}
    cores = [sum(a.cpu_percent for a in p.processes.apps
                 if a.category == "measured engine" and a.cpu_percent is not None) / 100
             for p in run.probes if p.request_id in measured and p.processes is not None
             and not p.processes.warming_up
             and any(a.category == "measured engine" for a in p.processes.apps)]
    assert cores and offload["value"] == round(statistics.median(cores), 2)
    assert offload["message"].startswith(
        "the engine says the model is 100 % on the GPU, but no GPU is visible on this "
        f"machine; its processes used {statistics.median(cores):.1f} cores of CPU, decode ")
    report = _llmtop("report", str(log))
    assert report.returncode == 0, report.stderr
    assert offload["message"] in report.stdout and "num_gpu" in report.stdout
