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

3. The monitor's own footprint on an idle GPU: the board's power and clocks with llmtop's TUI
   open (against a scripted Ollama in this process, so nothing else touches the GPU) and
   closed, --tui-idle seconds each (30), alternated over --tui-rounds rounds (2: open,
   closed, closed, open), after --settle seconds (10) for the TUI to start or the board to
   settle. In each window the only NVML calls are the board's energy counter at its two ends
   (the mean power) and its clocks and performance state once at its end, the same in both
   conditions, so the measurement does not itself keep the board awake; a board without an
   energy counter has its power read every 5 s instead. The TUI reads the GPU every
   sampler.IDLE_GPU_BEAT_S (5 s) while idle: these rows say what that costs the board.

The load is bf16 matrix products through PyTorch when it is installed (else the GPU idles
and only part 1 means much). Phases: idle, load, idle (seconds: --idle, --load).

    python bench/gpu_check.py [--idle 2] [--load 5] [--period-ms 10] [--json FILE]
    python bench/gpu_check.py --tui-only [--tui-idle 30] [--tui-rounds 2] [--settle 10]
    python bench/gpu_check.py --tui-only --dry-run   # the plan and the TUI's command, no GPU

No target is asserted: it prints what it read, for the note and docs/guide/energy.md.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
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


POWER_POLL_S = 5.0  # a board without an energy counter: its power read this often


def _board_now(lib: Any, h: Any) -> dict[str, Any]:
    """The board's clocks (MHz) and performance state now (None where not supported)."""
    def call(fn: str, *a: Any) -> Any:
        try:
            return getattr(lib, fn)(h, *a)
        except Exception:  # noqa: BLE001 - a figure this board lacks
            return None

    return {"graphics_mhz": call("nvmlDeviceGetClockInfo", getattr(lib, "NVML_CLOCK_GRAPHICS", 0)),
            "memory_mhz": call("nvmlDeviceGetClockInfo", getattr(lib, "NVML_CLOCK_MEM", 2)),
            "pstate": call("nvmlDeviceGetPerformanceState")}


def _energy_mj(lib: Any, h: Any) -> int | None:
    try:
        return int(lib.nvmlDeviceGetTotalEnergyConsumption(h))
    except Exception:  # noqa: BLE001 - no energy counter on this board
        return None


def idle_window(lib: Any, h: Any, seconds: float) -> dict[str, Any]:
    """One idle window on GPU handle `h` (module docstring, part 3): mean power in W from the
    energy counter at its ends (else power every POWER_POLL_S), clocks and state at its
    end. lib None (no NVML): the window is waited and its figures are None."""
    if lib is None:
        time.sleep(seconds)
        return {"seconds": seconds, "power_w": None, "power_from": None}
    t0, e0 = time.perf_counter_ns(), _energy_mj(lib, h)
    watts: list[float] = []
    if e0 is None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(min(POWER_POLL_S, max(0.0, end - time.monotonic())))
            with contextlib.suppress(Exception):
                watts.append(lib.nvmlDeviceGetPowerUsage(h) / 1000.0)
    else:
        time.sleep(seconds)
    e1, t1 = _energy_mj(lib, h), time.perf_counter_ns()
    span = (t1 - t0) / 1e9
    if e0 is not None and e1 is not None and e1 >= e0:
        power, source = (e1 - e0) / 1000.0 / span, "energy counter"
    else:
        power = statistics.mean(watts) if watts else None
        source = f"power every {POWER_POLL_S:g} s" if watts else None
    return {"seconds": round(span, 2), "power_w": power, "power_from": source,
            **_board_now(lib, h)}


def tui_plan(rounds: int) -> list[str]:
    """The conditions in order: open, closed, then closed, open, ... (ABBA: a drift of the
    board's temperature over the run weighs on both alike)."""
    return [c for r in range(rounds) for c in (("open", "closed") if r % 2 == 0
                                                else ("closed", "open"))]


def tui_argv(url: str, log: str) -> list[str]:
    """The TUI's command line against the scripted Ollama at `url`."""
    return [sys.executable, "-m", "llmtop", "--engine", "ollama", "--host", url,
            "--model", "timed", "--log", log]


def tui_idle(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Part 3 (module docstring): one row per window, printed as it is measured."""
    plan = tui_plan(args.tui_rounds)
    print(f"idle GPU, llmtop's TUI open against closed: {args.tui_idle:g} s windows after "
          f"{args.settle:g} s settling, in this order: {', '.join(plan)}")
    if args.dry_run:
        print("the TUI: " + " ".join(tui_argv("http://127.0.0.1:PORT", "LOG")))
        return []
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from tui_cost import PtyApp  # the TUI on a pseudo-terminal, its output drained

    from llmtop.testing.scripted import ScriptedUpstream

    lib = _load_pynvml()
    h = None
    if lib is not None:
        try:
            lib.nvmlInit()
            h = lib.nvmlDeviceGetHandleByIndex(0)
        except Exception as exc:  # noqa: BLE001 - no NVIDIA GPU: the windows still run
            print(f"  NVML unavailable ({exc}): the figures are n/a")
            lib = None
    rows = []
    with ScriptedUpstream() as up, tempfile.TemporaryDirectory() as tmp:
        for i, condition in enumerate(plan):
            app, log = None, Path(tmp) / f"tui-{i}.jsonl"
            if condition == "open":
                app = PtyApp(tui_argv(up.url, str(log)), cwd=tmp)
            time.sleep(args.settle)
            row = {"window": i + 1, "tui": condition,
                   **idle_window(lib, h, args.tui_idle)}
            if app is not None:
                row["tui_alive"] = app.proc.poll() is None  # the TUI ran through the window
                app.quit()
                # its probe samples: the TUI was sampling (and reading the GPU on its beat)
                row["tui_probes"] = sum('"type": "probe"' in line for line in
                                        log.read_text(encoding="utf-8").splitlines()) \
                    if log.exists() else 0
            rows.append(row)
            print("  " + _row_text(row))
    for condition in ("open", "closed"):
        got = [r["power_w"] for r in rows if r["tui"] == condition and r["power_w"] is not None]
        print(f"TUI {condition}: median {statistics.median(got):.2f} W over {len(got)} windows"
              if got else f"TUI {condition}: no power read")
    return rows


def _row_text(row: dict[str, Any]) -> str:
    def fig(key: str, unit: str, fmt: str = "{:.0f}") -> str:
        value = row.get(key)
        return "n/a" if value is None else fmt.format(value) + unit

    alive = "" if row.get("tui_alive", True) else " (the TUI had exited!)"
    if "tui_probes" in row:
        alive += f"; the TUI logged {row['tui_probes']} probe samples (idle ones thinned)"
    return (f"window {row['window']}: TUI {row['tui']:<6} {row['seconds']:g} s  "
            f"{fig('power_w', ' W', '{:.2f}')} ({row.get('power_from') or 'n/a'})  graphics "
            f"{fig('graphics_mhz', ' MHz')}  memory {fig('memory_mhz', ' MHz')}  "
            f"P{row.get('pstate') if row.get('pstate') is not None else '?'}{alive}")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--idle", type=float, default=2.0)
    ap.add_argument("--load", type=float, default=5.0)
    ap.add_argument("--period-ms", type=float, default=10.0)
    ap.add_argument("-n", type=int, default=300)
    ap.add_argument("--json", default=None)
    ap.add_argument("--tui-idle", type=float, default=30.0,
                    help="seconds of each idle window, TUI open or closed (0: skip part 3)")
    ap.add_argument("--tui-rounds", type=int, default=2, help="open/closed pairs (ABBA)")
    ap.add_argument("--settle", type=float, default=10.0,
                    help="seconds before each window (the TUI starting, the board settling)")
    ap.add_argument("--tui-only", action="store_true", help="part 3 only")
    ap.add_argument("--dry-run", action="store_true",
                    help="print part 3's plan and the TUI's command line; touch no GPU")
    return ap


def probe_part(args: argparse.Namespace, out: dict[str, Any]) -> GpuProbe | None:
    """Part 1: every field of a sample and what the calls cost; None without a GPU."""
    probe = GpuProbe()
    first = probe.sample()
    out["available"], out["reason"] = first.available, first.reason
    out["driver"] = first.driver_version
    print(f"GpuProbe: available={first.available} reason={first.reason} "
          f"driver={first.driver_version}")
    if not first.available:
        return None
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
    return probe


def _loaded_window(args: argparse.Namespace, reader: EnergyReader, probe: GpuProbe,
                   out: dict[str, Any]) -> tuple[list[tuple[int, float]], int, int,
                                                 dict[str, Any]]:
    """Idle, load, idle with the reader and this script's own power series polled every
    --period-ms: (the power series, load start ns, load end ns, what the probe saw during
    the load); the work done goes to out["work"]."""
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
    time.sleep(args.idle)
    stop.set()
    poller.join()
    return power, t_load0, ends[0], during


def energy_part(args: argparse.Namespace, probe: GpuProbe, out: dict[str, Any]) -> bool:
    """Part 2: the reader's joules against this script's power trapezoid; False when NVML
    gives no energy source."""
    discovery = discover_sources()
    print("energy sources:", [(i.name, i.kind.value, i.readable, i.reason)
                              for i in discovery.infos])
    reader = EnergyReader(discovery.readable)
    names = [i.name for i in reader.infos if i.name.startswith("nvml:")]
    if not names:
        return False
    name = names[0]
    power, t_load0, t_load1, during = _loaded_window(args, reader, probe, out)
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
    return True


def main() -> None:
    args = _parser().parse_args()
    out: dict[str, Any] = {}
    if args.tui_only or args.dry_run:
        out["tui_idle"] = tui_idle(args)
        _save(out, args.json)
        return
    probe = probe_part(args, out)
    if probe is None or not energy_part(args, probe, out):
        print(json.dumps(out))
        return
    if args.tui_idle > 0:
        out["tui_idle"] = tui_idle(args)
    _save(out, args.json)


def _save(out: dict[str, Any], path: str | None) -> None:
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
