"""A record of the machine a session ran on (for the session log header and reports)."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

import psutil

from llmtop.probes.gpu import GpuProbe
from llmtop.probes.system import SystemProbe, container_limits


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
    the tool named), power source and container limits (`container_record`), as a JSON-ready
    dict (every session log's header)."""
    gpu = GpuProbe().sample()
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
                "devices": [{"name": d.name, "memory_total": d.memory_total} for d in gpu.devices],
            }
            if gpu.available
            else {"available": False, "reason": gpu.reason}
        ),
        "power": "battery"
        if battery
        else ("mains" if battery is False else "unknown (no battery found)"),
        "container": container_record(limits, host_cores),
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
