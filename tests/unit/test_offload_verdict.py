""""It says 100 % GPU, so why is it slow?": the engine's claim (`/api/ps` size_vram of size)
against the probe samples of the request (sessions/analysis/offload.py), and `llmtop run`
saying it with a scripted Ollama that claims the whole model in VRAM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmtop.sessions.analysis.offload import gpu_share, offload_finding
from llmtop.sessions.records.schema import (
    AppCpu,
    GpuDeviceRecord,
    GpuRecord,
    ProbeRecord,
    ProcessesRecord,
)
from llmtop.testing.scripted import ScriptedUpstream, Timing

ROOT = Path(__file__).resolve().parents[2]
ENGINE = "measured engine"


def probe(engine_cpu: float | None, gpu_busy: float | None, gpu: bool = True) -> ProbeRecord:
    apps = () if engine_cpu is None else (AppCpu("ollama", ENGINE, engine_cpu),
                                          AppCpu("Chromium", "browser", 50.0))
    devices = (GpuDeviceRecord("RTX", gpu_busy, 1, 2),) if gpu else ()
    return ProbeRecord(t_ns=0, processes=ProcessesRecord(False, apps),
                       gpu=GpuRecord(gpu, None if gpu else "no NVIDIA driver", devices))


def test_the_share_is_size_vram_of_size():
    assert gpu_share(1000, 1000) == 1.0 and gpu_share(1000, 420) == 0.42
    assert gpu_share(None, 5) is None and gpu_share(0, 0) is None and gpu_share(10, None) is None


def test_a_runner_on_the_cpu_contradicts_a_model_all_on_the_gpu():
    # engine CPU 150, 210, 250 % of one core: median 2.1 cores >= 2 → fail; GPU busy
    # 4, 6, 5 %: median 5 %
    probes = [probe(150.0, 4.0), probe(210.0, 6.0), probe(250.0, 5.0)]
    f = offload_finding(1.0, probes, 7.5)
    assert (f.code, f.level, f.value, f.threshold, f.unit) == (
        "offload-mismatch", "fail", 2.1, 1.2, "cores")
    assert f.message == ("the engine says the model is 100 % on the GPU, but its processes "
                         "used 2.1 cores of CPU during the request, GPU busy 5 %, decode "
                         "7.5 tok/s")
    assert "num_ctx" in f.remedy and "num_gpu" in f.remedy
    # 1.3 cores (median of 1.2, 1.3, 1.4): past one feeding thread, under two: warn
    warn = offload_finding(1.0, [probe(120.0, 50.0), probe(130.0, 50.0), probe(140.0, 50.0)],
                           None, engine="llama-server")
    assert warn.level == "warn" and warn.value == 1.3 and "-ngl" in warn.remedy


def test_an_idle_gpu_while_tokens_stream_contradicts_it():
    f = offload_finding(1.0, [probe(40.0, 3.0), probe(45.0, 2.0)], 12.0)
    # the runner is under 1.2 cores, the GPU 2.5 % busy (median of 3 and 2) < 10 %
    assert (f.level, f.value, f.unit) == ("warn", 2.5, "% GPU busy")


def test_no_finding_where_the_machine_agrees_or_the_claim_is_not_all_gpu():
    agreeing = [probe(60.0, 92.0), probe(70.0, 95.0)]
    assert offload_finding(1.0, agreeing, 40.0) is None
    assert offload_finding(0.42, [probe(300.0, 1.0)], 5.0) is None  # a split said elsewhere
    assert offload_finding(None, [probe(300.0, 1.0)], 5.0) is None  # no claim
    assert offload_finding(1.0, [probe(None, None)], 5.0) is None  # nothing read: absent


def test_no_gpu_at_all_is_a_fail_naming_the_runners_cpu():
    f = offload_finding(1.0, [probe(90.0, None, gpu=False), probe(110.0, None, gpu=False)], 9.0)
    assert f.level == "fail" and f.value == 1.0  # median of 0.9 and 1.1 cores
    assert f.message == ("the engine says the model is 100 % on the GPU, but no GPU is "
                         "visible on this machine; its processes used 1.0 cores of CPU, "
                         "decode 9.0 tok/s")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux probe run")
def test_run_says_it_with_a_scripted_ollama_that_claims_all_of_the_model_in_vram(tmp_path):
    # the scripted Ollama's /api/ps: the whole model in VRAM; a busy process stands for its
    # runner (--engine-pid). This machine shows no GPU (NVML absent, no DRM card), so the
    # finding is the no-GPU fail, with the runner's CPU named.
    ps = {"models": [{"name": "timed", "model": "timed", "size": 4_000_000_000,
                      "size_vram": 4_000_000_000, "digest": "d",
                      "expires_at": "2026-12-06T10:00:00Z", "details": {}}]}
    if Path("/sys/class/drm").exists() and any(Path("/sys/class/drm").glob("card*")):
        pytest.skip("this machine has a DRM card: the no-GPU case cannot be made here")
    runner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with ScriptedUpstream(Timing(first_s=0.1, chunks=50, gap_s=0.06), ps=ps) as up:
            done = subprocess.run(
                [sys.executable, "-m", "llmtop", "--engine", "ollama", "--host", up.url,
                 "--model", "timed", "--engine-pid", str(runner.pid), "run", "--json",
                 "--prompt", "hi", "--log", str(tmp_path / "r.jsonl")],
                env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                timeout=120, check=False)
    finally:
        runner.kill()
        runner.wait()
    data = json.loads(done.stdout)
    found = [f for f in data["findings"] if f["code"] == "offload-mismatch"]
    assert len(found) == 1, data["findings"]
    assert found[0]["level"] == "fail"
    assert "no GPU is visible on this machine; its processes used" in found[0]["message"]


def test_the_reports_gpu_cells_name_the_reader_that_gave_them():
    from llmtop.sessions.analysis.run import gpu_usage

    amd = ProbeRecord(t_ns=0, gpu=GpuRecord(True, None, (
        GpuDeviceRecord("Radeon", 37.0, 4 << 30, 24 << 30, source="sysfs"),)))
    old = probe(10.0, 80.0)  # a device without `source`: a log from before other vendors
    assert gpu_usage([amd]).source == "sysfs"
    assert gpu_usage([old]).source == "nvml"
    assert gpu_usage([amd, old]).source == "nvml+sysfs"
    assert gpu_usage([amd, old]).util_median == pytest.approx(58.5)  # median of 37 and 80
