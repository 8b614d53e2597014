"""A real NVIDIA GPU read as llmtop reads it; run where one is (no test needs it).

What it checks, on the machine it runs on:

1. `probes.gpu.GpuProbe`: every field of a sample (name, memory, power, clocks, throttle
   reasons, the processes using the GPU, this one included while it loads the GPU), and what
   a `sample()` and a `clocks()` call cost (CPU µs and wall µs, median of n): the probe
   sampler calls them once a second, so they count against llmtop's own budget.
2. `probes.energy` over NVML: the joules llmtop's reader gives for a loaded window
   (`EnergyReader.window` on the board's energy counter, mJ) against an independent
   figure, this script's own trapezoid over `nvmlDeviceGetPowerUsage` polled at the same
   rate; and the counter's update period as the samples show it.

The load is bf16 matrix products through PyTorch when it is installed (else the GPU idles
and only part 1 means much). Phases: idle, load, idle (seconds: --idle, --load).

    python bench/gpu_check.py [--idle 2] [--load 5] [--period-ms 10] [--json FILE]

No target is asserted: it prints what it read, for the note and docs/guide/energy.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import threading
import time
from typing import Any

from llmtop.probes.energy import EnergyReader, discover_sources, observed_update_period
from llmtop.probes.gpu import GpuProbe, _load_pynvml


def _cost(fn: Any, n: int) -> dict[str, float]:
    """Median CPU µs and wall µs of `fn()` over n calls."""
    cpu, wall = [], []
    for _ in range(n):
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        fn()
        cpu.append((time.thread_time_ns() - c0) / 1e3)
        wall.append((time.perf_counter_ns() - w0) / 1e3)
    return {"cpu_us_p50": statistics.median(cpu), "wall_us_p50": statistics.median(wall),
            "wall_us_max": max(wall), "n": n}


def _call_costs(n: int) -> dict[str, dict[str, float]]:
    """What each NVML call of a `GpuProbe.sample()` costs on GPU 0."""
    lib = _load_pynvml()
    h = lib.nvmlDeviceGetHandleByIndex(0)
    calls = {
        "nvmlDeviceGetName": (h,),
        "nvmlDeviceGetUtilizationRates": (h,),
        "nvmlDeviceGetMemoryInfo": (h,),
        "nvmlDeviceGetTemperature": (h, 0),
        "nvmlDeviceGetClockInfo": (h, 0),
        "nvmlDeviceGetMaxClockInfo": (h, 0),
        "nvmlDeviceGetCurrentClocksEventReasons": (h,),
        "nvmlDeviceGetPowerUsage": (h,),
        "nvmlDeviceGetTotalEnergyConsumption": (h,),
        "nvmlDeviceGetComputeRunningProcesses": (h,),
        "nvmlDeviceGetGraphicsRunningProcesses": (h,),
    }
    out = {}
    for fn, fargs in calls.items():
        call = getattr(lib, fn, None)
        if call is None:
            continue
        try:
            out[fn] = _cost(lambda call=call, fargs=fargs: call(*fargs), n)
        except Exception as exc:  # noqa: BLE001 - a call this board lacks is reported
            out[fn] = {"error": str(exc)}
    return out


def _operands() -> tuple[Any, Any] | str:
    """Two bf16 8192² matrices on the GPU (CUDA set up before the timed phases), or why
    there are none."""
    try:
        import torch
    except ImportError:
        return "no torch: the GPU idled"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device: the GPU idled"
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    return a, b


def _load(seconds: float, operands: tuple[Any, Any] | str, stop_at: list[int]) -> str:
    """bf16 matrix products for `seconds`; returns what ran. Appends its end stamp."""
    if isinstance(operands, str):
        time.sleep(seconds)
        stop_at.append(time.perf_counter_ns())
        return operands
    import torch

    a, b = operands
    end = time.perf_counter_ns() + int(seconds * 1e9)
    products = 0
    while time.perf_counter_ns() < end:
        for _ in range(20):
            a @ b
        torch.cuda.synchronize()
        products += 20
    stop_at.append(time.perf_counter_ns())
    flops = products * 2 * 8192**3
    return f"{products} bf16 8192³ products ({flops / seconds / 1e12:.0f} TFLOP/s)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--idle", type=float, default=2.0)
    ap.add_argument("--load", type=float, default=5.0)
    ap.add_argument("--period-ms", type=float, default=10.0)
    ap.add_argument("-n", type=int, default=300)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    out: dict[str, Any] = {}

    probe = GpuProbe()
    first = probe.sample()
    out["available"], out["reason"] = first.available, first.reason
    out["driver"] = first.driver_version
    print(f"GpuProbe: available={first.available} reason={first.reason} "
          f"driver={first.driver_version}")
    if not first.available:
        print(json.dumps(out))
        return
    for d in first.devices:
        print(f"  gpu{d.index}: {d.name}; mem {d.memory_used}/{d.memory_total} B; "
              f"util {d.util_percent} %; {d.temperature_c} °C; {d.power_w} W; clocks "
              f"{d.clock_graphics_mhz}/{d.clock_graphics_max_mhz} MHz graphics, "
              f"{d.clock_memory_mhz}/{d.clock_memory_max_mhz} MHz memory; throttle "
              f"{d.throttle_reasons}; processes {d.processes}")
    out["cost_sample"] = _cost(probe.sample, args.n)
    out["cost_clocks"] = _cost(probe.clocks, args.n)
    print(f"cost: sample() {out['cost_sample']}; clocks() {out['cost_clocks']}")
    out["cost_calls"] = _call_costs(args.n // 3)
    for fn, c in out["cost_calls"].items():
        print(f"  {fn}: {c}")

    discovery = discover_sources()
    print("energy sources:", [(i.name, i.kind.value, i.readable, i.reason)
                              for i in discovery.infos])
    reader = EnergyReader(discovery.readable)
    names = [i.name for i in reader.infos if i.name.startswith("nvml:")]
    if not names:
        print(json.dumps(out))
        return
    name = names[0]
    lib = _load_pynvml()
    handle = lib.nvmlDeviceGetHandleByIndex(0)
    power: list[tuple[int, float]] = []  # (perf_counter ns, W): this script's own series
    stop = threading.Event()

    def poll() -> None:
        period = args.period_ms / 1e3
        while not stop.is_set():
            reader.sample()
            t0 = time.perf_counter_ns()
            mw = lib.nvmlDeviceGetPowerUsage(handle)
            power.append(((t0 + time.perf_counter_ns()) // 2, mw / 1000.0))
            time.sleep(period)

    operands = _operands()
    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    time.sleep(args.idle)
    t_load0 = time.perf_counter_ns()
    ends: list[int] = []
    during: dict[str, Any] = {}

    def look() -> None:  # what the probe sees while the load runs
        time.sleep(args.load / 2)
        s = probe.sample()
        d = s.devices[0]
        during.update(util=d.util_percent, power_w=d.power_w, mem_used=d.memory_used,
                      pids=[p.pid for p in d.processes], clocks=str(probe.clocks()))

    looker = threading.Thread(target=look)
    looker.start()
    out["work"] = _load(args.load, operands, ends)
    looker.join()
    t_load1 = ends[0]
    time.sleep(args.idle)
    stop.set()
    poller.join()
    t_all0, t_all1 = t_load0 - int(args.idle * 0.9e9), t_load1 + int(args.idle * 0.9e9)

    def trapezoid(a_ns: int, b_ns: int) -> float:
        pts = [(t, w) for t, w in power if a_ns <= t <= b_ns]
        return sum((t2 - t1) / 1e9 * (w1 + w2) / 2 for (t1, w1), (t2, w2) in
                   itertools.pairwise(pts))

    for label, a_ns, b_ns in (("load", t_load0, t_load1), ("span", t_all0, t_all1)):
        w = reader.window(name, a_ns, b_ns)
        ref = trapezoid(a_ns, b_ns)
        out[label] = {"counter_j": w.joules, "power_trapezoid_j": ref,
                      "seconds": (b_ns - a_ns) / 1e9, "coarse": w.coarse, "reason": w.reason,
                      "ratio": (w.joules / ref) if w.joules and ref else None}
        print(f"{label}: llmtop counter {w.joules} J vs power trapezoid {ref:.1f} J over "
              f"{(b_ns - a_ns) / 1e9:.2f} s (mean {w.mean_power_w} W)")
    out["update_period_s"] = observed_update_period(reader.samples(name))
    out["during"] = during
    out["pid"] = os.getpid()
    out["pid_seen"] = os.getpid() in during.get("pids", [])
    print(f"counter update period (observed): {out['update_period_s']} s; during load: "
          f"{during}; own pid {os.getpid()} listed: {out['pid_seen']}; load: {out['work']}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
