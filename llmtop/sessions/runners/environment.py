"""What a run records about where it ran: the machine (`environment`, for the session log's
header and reports), the engine and its loaded model (`engine_environment`, the
"environment" records at a bench's or sweep's start and end), the engine's parallel slots
where it reveals them (`engine_parallelism`, a sweep's), and the preflight verdict
(`preflight_record`).

How many requests an engine serves at once:
* llmtop's embedded engine serves one request at a time (its generation lock,
  llmtop/servers/embedded/app.py).
* Ollama reads `OLLAMA_NUM_PARALLEL` (slots per loaded model) and `OLLAMA_MAX_QUEUE` from
  its own environment (Ollama's FAQ, "How does Ollama handle concurrent requests?");
  its API does not report them, so they are read from the environment of the local server
  process when the OS lets us (`psutil.Process.environ`). Unset means Ollama's default.
* llama-server says it in `/props`: `total_slots` (its `--parallel`), each slot's context in
  `default_generation_settings.n_ctx` (engines/llama_props.py).
"""

from __future__ import annotations

import asyncio
import os
import platform
import sys
from typing import Any

import psutil

from llmtop.engines.connection import Connection
from llmtop.probes.apple import gpu_probe, mac_environment
from llmtop.probes.config import load_thresholds
from llmtop.probes.engine_state import CouldNotCheck, EngineLike, engine_findings
from llmtop.probes.preflight import run_preflight
from llmtop.probes.remote import AgentError, AgentSampler, AgentTarget
from llmtop.probes.system import SystemProbe, container_limits
from llmtop.sessions.records.schema import EnvironmentRecord, PreflightRecord

PROBE_INTERVAL_S = 0.5  # "about 1 Hz or faster during requests"; a bench is all requests


def cpu_model() -> str:
    """The CPU's marketing name where the OS tells it (Linux /proc/cpuinfo, else platform)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict[str, Any]:
    """OS, CPU model and core counts, RAM (bytes), Python version, GPU (NVML when present, with
    the tool named), power source and container limits (`container_record`), and on a Mac its
    macOS version, chip, model and what the energy channel map was checked on
    (`probes.apple.mac_environment`, key "mac"), as a JSON-ready dict (every session log's
    header)."""
    gpu = gpu_probe().sample()  # on a Mac, Apple Silicon's GPU
    battery = SystemProbe().sample().on_battery
    limits = container_limits()
    host_cores = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    return {
        "os": f"{platform.system()} {platform.release()}",
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_cores_physical": psutil.cpu_count(logical=False),
        "cpu_cores_logical": psutil.cpu_count(logical=True) or os.cpu_count(),
        "ram_bytes": psutil.virtual_memory().total,
        "python": sys.version.split()[0],
        "gpu": (
            {
                "source": gpu.source,
                "driver_version": gpu.driver_version,
                "devices": [{"name": d.name, "memory_total": d.memory_total,
                             "vendor": d.vendor, "driver": d.driver, "source": d.source}
                            for d in gpu.devices],
            }
            if gpu.available
            else {"available": False, "reason": gpu.reason}
        ),
        "power": "battery"
        if battery
        else ("mains" if battery is False else "unknown (no battery found)"),
        "container": container_record(limits, host_cores),
        **({"mac": mac} if (mac := mac_environment()) is not None else {}),
    }


def container_record(limits: Any, host_cores: int) -> dict[str, Any] | None:
    """The cgroup limits as a JSON-ready dict with a one-line description ("container: 2.0
    CPUs of 16 host cores, memory limit 4 GiB"); None when no CPU quota or memory limit applies
    (`limits`: a `probes.cgroup.CgroupLimits` or None)."""
    if limits is None or not limits.limited:
        return None
    return {
        "description": limits.describe(host_cores),
        "cgroup_version": limits.version,
        "cpus": limits.cpus,
        "memory_limit_bytes": limits.memory_bytes,
        "host_cores": host_cores,
    }


async def engine_environment(conn: Connection) -> dict[str, Any]:
    """What the engine says about itself and the model: version, /api/show, /api/ps; for
    llama-server its `/props` and `/slots` read now (`server_config`: the slots' state at the
    run's start or end)."""
    info = conn.info
    env: dict[str, Any] = {
        "engine": conn.engine.name,
        "engine_version": conn.version,
        "engine_config": conn.engine_config,
        "host": conn.engine.host,
        "upstream": conn.upstream.host,
        "model": conn.model,
        "model_details": info.to_dict() if info else None,
    }
    read_config = getattr(conn.upstream, "server_config", None)
    if read_config is not None:  # llama-server: /props and /slots as they are now
        fresh = await read_config()
        if fresh is not None:
            env["server_config"] = fresh
    try:
        loaded = await conn.upstream.model_info(conn.model)
        env["loaded"] = {
            "size": loaded.size,
            "size_vram": loaded.size_vram,
            "context_length": loaded.context_length,
            "source": "/api/ps",
        }
        if loaded.size and loaded.size_vram is not None and loaded.size_vram < loaded.size:
            share = 100 * (1 - loaded.size_vram / loaded.size)
            env["loaded"]["note"] = f"size_vram < size: {share:.0f} % of the model runs on the CPU"
    except Exception as exc:  # noqa: BLE001 - an environment detail, not a reason to stop
        env["loaded"] = {"error": str(exc)}
    return env


async def preflight_record(conn: Connection, duration_s: float,
                           agent: AgentTarget | None = None) -> PreflightRecord:
    """The preflight verdict (probes over `duration_s` + the engine's /api/ps findings), as
    the log's "preflight" record. Thresholds come from the config file (probes/config.py).
    agent: sample the engine's machine through `llmtop agent` (`--probes`) instead of this one."""
    thresholds = load_thresholds()
    sampler = None if agent is None else AgentSampler(agent, thresholds=thresholds)
    try:
        result = await asyncio.to_thread(
            run_preflight, duration_s, thresholds=thresholds,
            engine_pids=lambda: conn.engine_pids, sampler=sampler,
            engine_threads=conn.compute_threads(),
        )
    except AgentError as exc:  # the bench goes on; --require-quiet then refuses (not quiet)
        finding = {"code": "probe-error", "level": "warn", "value": None, "threshold": None,
                   "unit": "", "message": str(exc),
                   "remedy": "start `llmtop agent` on the engine's machine, or drop --probes"}
        return PreflightRecord.of({"verdict": "CANNOT CHECK", "quiet": False, "error": str(exc),
                                   "duration_s": 0.0, "samples": 0, "findings": [finding]})
    upstream = conn.upstream
    if isinstance(upstream, EngineLike):
        engine = await engine_findings(upstream, conn.model, gpu_present=result.gpu_present)
    else:
        engine = CouldNotCheck(upstream.host, f"{upstream.name} has no /api/ps to read")
    if isinstance(engine, CouldNotCheck):
        return PreflightRecord.of({**result.to_dict(), "engine_check": engine.reason})
    return PreflightRecord.of(result.with_findings(engine).to_dict())


async def environment_record(conn: Connection, phase: str,
                             **extra: Any) -> EnvironmentRecord:
    """The "environment" record of a run's `phase` ("start" / "end"): engine_environment
    plus `extra` (a sweep's parallel slots)."""
    return EnvironmentRecord.of({"phase": phase, **await engine_environment(conn), **extra})


OLLAMA_PARALLEL_VARS = ("OLLAMA_NUM_PARALLEL", "OLLAMA_MAX_QUEUE", "OLLAMA_MAX_LOADED_MODELS")


def engine_parallelism(conn: Connection) -> dict[str, Any]:
    """{"slots": 1, "source": …} for the embedded engine; for Ollama the parallel variables
    found in its server process's environment (absent ones as "unset (Ollama's default)")
    and the pid read; else {"source": "not revealed: …"}. Never raises."""
    if conn.upstream.name == "embedded":
        return {"slots": 1, "source": "llmtop's embedded engine serves one request at a time"}
    cfg = conn.engine_config if isinstance(conn.engine_config, dict) else {}
    if cfg.get("server") == "llama-server" and isinstance(cfg.get("total_slots"), int):
        return {"slots": cfg["total_slots"], "n_ctx_per_slot": cfg.get("n_ctx_per_slot"),
                "source": "llama-server's /props (total_slots: its --parallel)"}
    for pid in sorted(conn.engine_pids):
        try:
            process = psutil.Process(pid)
            if "ollama" not in process.name().lower():
                continue  # a runner's child or another server on the port: not Ollama's
            env = process.environ()
        except (psutil.Error, OSError):
            continue
        found: dict[str, Any] = {
            name: env.get(name, "unset (Ollama's default)") for name in OLLAMA_PARALLEL_VARS
        }
        if "OLLAMA_NUM_PARALLEL" in env and env["OLLAMA_NUM_PARALLEL"].strip().isdigit():
            found["slots"] = int(env["OLLAMA_NUM_PARALLEL"])
        return {**found, "source": f"environment of the engine process (pid {pid})"}
    return {
        "source": "not revealed: the engine's API does not report its parallel slots and "
        "no local engine process could be read"
    }
