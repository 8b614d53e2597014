"""What a run's report says of the machine: its GPU, CPU and environment, energy, and
whether the machine kept what preflight said.

The report's GPU cells (the GPU readers' samples, /api/ps's view of the loaded model), the
"Environment" table (the log header's machine_environment), the "Energy" section
(analysis/energy.py's summary: per-request medians, the run's all-in figure) and
`preflight_held`, which the markdown (run_markdown.py) and the JSON
(run_data.py) both show. The `Report` they read is run.py's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from llmtop.engines.connection import describe_config
from llmtop.sessions.analysis.energy import EnergySummary
from llmtop.sessions.reports.run import Report
from llmtop.sessions.reports.text import md_table
from llmtop.sessions.reports.text import num as _num
from llmtop.sessions.reports.text import size as _bytes

# no NVIDIA driver: probes.gpu.init_failure's words, and the raw errors older logs carry
NO_NVIDIA_DRIVER = ("no NVIDIA driver", "Shared Library Not Found", "cannot open shared object",
                    "No module named")


def gpu_absent(reason: str | None) -> str:
    """Why there is no GPU figure, in words: "none" when NVML's library is not there at all (no
    NVIDIA driver: the machine has no GPU llmtop can read), else the probe's reason (a driver
    not loaded, no permission) — the library's own error text was a report's GPU line before."""
    if reason is None:
        return "not checked"
    if any(mark in reason for mark in NO_NVIDIA_DRIVER):
        return "none"
    return reason


def gpu_cells(report: Report) -> tuple[str, str]:
    """GPU util % (median of the probe samples) and VRAM, each with the tool it came from."""
    loaded = report.loaded
    ps = ""
    if loaded.get("size"):
        ps = f"{_bytes(loaded.get('size_vram'))} of {_bytes(loaded.get('size'))} (/api/ps)"
        if loaded.get("size_vram") == 0:  # a bare "0 B" read as a fault
            ps = f"none: the model runs on the CPU (0 of {_bytes(loaded.get('size'))}, /api/ps)"
    gpu = report.gpu
    if gpu.util_median is None:
        reason = (report.log.header.machine_environment.get("gpu") or {}).get("reason")
        said = "no GPU samples" if reason is None else gpu_absent(reason)
        return ("n/a (no GPU)" if said == "none" else f"n/a ({said})"), ps or "n/a"
    util = f"{gpu.util_median:.0f} ({gpu.source}, median)"
    vram = f"{_bytes(gpu.peak_used)} peak ({gpu.source})" + (f"; {ps}" if ps else "")
    return util, vram


def cpu_line(m: Mapping[str, Any]) -> str:
    """"model · 8 cores / 16 threads"; a count the machine did not tell (psutil's
    cpu_count(logical=False) is None in some VMs and containers) is "cores unknown", never
    "None cores"."""
    model = m.get("cpu_model") or "CPU model unknown"
    cores, threads = m.get("cpu_cores_physical"), m.get("cpu_cores_logical")
    return (f"{model} · " + (f"{cores} cores" if cores else "cores unknown") + " / "
            + (f"{threads} threads" if threads else "threads unknown"))


def _j(value: float | None, unit: str = "J") -> str:
    """An energy figure with 3 significant digits and its unit, or "n/a"."""
    return "n/a" if value is None else f"{value:.3g} {unit}"


ENERGY_NOTE = (
    "J / output token per request: decode joules (first token → last chunk) / output tokens; "
    "J / prompt token: prefill joules (send → first token) / prompt tokens; the run's figure: "
    "the measured requests' joules (send → last chunk, summed) / all their output tokens. "
    "Above idle: less the idle power measured in preflight's window × the window's seconds."
)


def markdown_energy(energy: EnergySummary | None) -> list[str]:
    """The "Energy" section: the sources line, then per source the per-request medians
    (total and above idle) and the run's all-in figure; n/a with the reason otherwise."""
    lines = ["", "## Energy", ""]
    if energy is None or not energy.available:
        line = energy.line if energy is not None else "energy: n/a"
        return [*lines, line]
    lines += [energy.line, ""]
    headers = ("source (covers)", "idle power", "n", "energy / request p50",
               "prefill / decode p50", "J / output token p50", "J / prompt token p50",
               "above idle: J / output token p50", "run: J / output token (all-in)", "notes")
    rows = []
    for s in energy.sources:
        p = {k: v.median for k, v in s.per_request.items()}
        n = s.per_request["output_j_per_token"].n
        run = s.run
        run_cell = "n/a" if run is None else (
            f"{_j(run.output_j_per_token)} ({_j(run.energy_j)} over {_num(run.duration_s, 2)} s, "
            f"{_j(run.mean_power_w, 'W')}"
            + (f"; above idle {_j(run.output_above_idle_j_per_token)}"
               if run.output_above_idle_j_per_token is not None else "") + ")")
        notes = [x for x in (s.note, "integrated from power samples" if s.integrated else None,
                             "coarse" if run is not None and run.coarse else None) if x]
        rows.append((f"{s.source} ({s.covers})", _j(s.idle_power_w, "W"), n,
                     _j(p["energy_j"]), f"{_j(p['prefill_j'])} / {_j(p['decode_j'])}",
                     _j(p["output_j_per_token"]), _j(p["prompt_j_per_token"]),
                     _j(p["output_above_idle_j_per_token"]), run_cell,
                     "; ".join(notes) or "—"))
    lines += md_table(headers, rows)
    lines += ["", ENERGY_NOTE]
    return lines


def preflight_held(report: Report) -> dict[str, Any] | None:
    """Did the machine keep what preflight said? None without a preflight;
    else {"preflight": its verdict, "episodes": slow episodes that followed, "changed": a
    QUIET preflight followed by episodes, "sentence": the report's line}."""
    pf = report.preflight
    if pf is None:
        return None
    count = sum(len(s.episodes.episodes) for s in report.analysis.sizes)
    changed = pf.quiet and count > 0
    if changed:
        sentence = (f"Preflight said {pf.verdict}, and {count} slow episode"
                    f"{'s' if count != 1 else ''} followed: the machine changed its mind "
                    "during the run.")
    else:
        follow = (f"{count} slow episode{'s' if count != 1 else ''} followed" if count
                  else "no slow episode followed")
        sentence = f"Preflight said {pf.verdict}; {follow}."
        noisy, total = report.noisy
        if pf.quiet and noisy:  # never a reassuring line beside a NOISY run
            sentence = (f"Preflight said {pf.verdict}, but the probes found the machine NOISY "
                        f"in {noisy} of {total} samples during the requests; {follow}.")
    return {"preflight": pf.verdict, "episodes": count, "changed": changed, "sentence": sentence}


def mac_line(mac: dict[str, Any]) -> str:
    """A Mac's row: "macOS 15.1 · Apple M4 · Mac16,10 · energy channels: <what they were
    checked on>" (n/a where not read)."""
    return (f"macOS {mac.get('macos_version') or 'n/a'} · {mac.get('chip') or 'chip n/a'} · "
            f"{mac.get('model') or 'model n/a'} · energy channels: "
            f"{mac.get('energy_channel_map') or 'n/a'}")


def environment_markdown(report: Report) -> list[str]:
    """The "Environment" section: llmtop, the engine and its configuration, the model and
    /api/ps's view of it, the options, and the machine (OS, CPU, RAM, GPU, power, container,
    Python) as the log's header recorded them; the run's start and end times."""
    h = report.log.header
    m = h.machine_environment
    md = h.model_details or {}
    loaded = report.loaded
    gpu = m.get("gpu") or {}
    devices = gpu.get("devices") or []
    gpus = ", ".join(f"{d.get('name')} ({_bytes(d.get('memory_total'))})" for d in devices)
    said = gpu_absent(gpu.get("reason"))
    gpus = gpus or ("none" if said == "none" else f"none ({said})")
    note = f" — {loaded['note']}" if loaded.get("note") else ""
    if loaded.get("size") and loaded.get("size_vram") == 0:
        note = " (all in RAM: the model runs on the CPU)" + note
    rows = [
        ("llmtop", h.llmtop_version),
        ("engine", f"{h.engine} {h.engine_version or ''} at {h.host}"
                   + (f" through the proxy {h.proxy} (it adds its hop to every TTFT)"
                      if h.proxy else "")),
        *([("engine configuration", described)]
          if (described := describe_config(h.engine_config)) else []),
        ("model", (f"{h.model} · {md.get('family')} · {md.get('parameter_size')} · "
                   f"{md.get('quantization')}")
         + (f" · runs on {md['remote']}, not on the machine below (remote: TTFT and E2E "
            f"include the network to {md['remote']}; the probes do not describe the machine "
            "that ran it)" if md.get("remote") else "")),
        ("loaded (/api/ps)",
         f"size {_bytes(loaded.get('size'))}, size_vram {_bytes(loaded.get('size_vram'))}{note}"),
        ("options", json.dumps(h.options)),
        ("OS", m.get("os")),
        *([("Mac", mac_line(mac))] if isinstance(mac := m.get("mac"), dict) else []),
        ("CPU", cpu_line(m)),
        ("RAM", _bytes(m.get("ram_bytes"))),
        ("GPU", gpus + (f" · driver {d}" if (d := gpu.get("driver_version")) else "")),
        ("power", m.get("power", "unknown")),
        *([("container", c["description"])] if isinstance(c := m.get("container"), dict)
          and c.get("description") else []),
        ("Python", m.get("python")),
        ("started", h.started_at),
        ("ended", report.log.ended_at or "n/a (log not closed)"),
    ]
    return ["", "## Environment", "", *md_table(("item", "value"), rows)]
