"""Machine CPU (total and per logical core), memory, swap and GPUs from one probe sample."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from llmtop.tui.state import fmt

if TYPE_CHECKING:  # the probes' modules (psutil, the GPU readers) load after the first frame
    from llmtop.probes.gpu import GpuDevice, GpuSample
    from llmtop.probes.system import SystemSample

BAR_CORES_MAX = 16  # up to this many cores: one labelled bar each; more: one cell per core
CORE_BAR_WIDTH = 8
CELLS_PER_ROW = 32


def _style(percent: float | None) -> str:
    """A CPU reading's colour: green below 40 %, yellow below 80 %, red from 80 %."""
    if percent is None:
        return "dim"
    return "red" if percent >= 80 else "yellow" if percent >= 40 else "green"


def system_text(system: SystemSample | None, gpu: GpuSample | None = None) -> Text:
    """CPU % of the whole machine with a bar, per-core bars or cells, memory and swap lines."""
    if system is None:
        return Text("system probe failed (see the verdict)", style="red")
    cpu = system.cpu_percent
    text = Text.assemble(
        "CPU  ", (f"{fmt.pct(cpu):>10}", "bold"), " ", (fmt.bar(cpu, 16), _style(cpu))
    )
    if system.load_avg_per_core is not None:
        text.append(f"\nload {system.load_avg_per_core:.2f} per core (1 min)", style="dim")
    cores = system.per_cpu
    if cores and len(cores) <= BAR_CORES_MAX:
        for i, value in enumerate(cores):
            text.append("\n" if i % 2 == 0 else "  ")
            text.append(f"{i:>2}▕")
            text.append(fmt.bar(value, CORE_BAR_WIDTH), style=_style(value))
            text.append(f"▏{value:3.0f}")
    elif cores:
        for start in range(0, len(cores), CELLS_PER_ROW):
            text.append(f"\n{start:>3} ")
            for value in cores[start : start + CELLS_PER_ROW]:
                text.append(fmt.spark_char(value), style=_style(value))
    used = system.mem_total - system.mem_available
    text.append(
        f"\nmem  {fmt.size(used)} / {fmt.size(system.mem_total)} ({system.mem_percent:.0f} %)"
    )
    if system.swap_total:
        text.append(
            f"\nswap {fmt.size(system.swap_used)} / {fmt.size(system.swap_total)}"
            f" ({system.swap_percent:.0f} %)"
        )
    else:
        text.append("\nswap none", style="dim")
    if gpu is not None and gpu.available:
        for d in gpu.devices:
            text.append("\n" + gpu_line(d))
            soc_lines(text, d)
    return text


RAIL_NAMES = {"cpu": "CPU", "gpu": "GPU", "ane": "ANE", "dram": "DRAM"}
THERMAL_STYLES = {"nominal": "green", "fair": "yellow", "serious": "red", "critical": "bold red"}


def soc_lines(text: Text, d: GpuDevice) -> None:
    """A system-on-chip's own lines under its GPU's (Apple Silicon: the GPU shares the SoC's
    power and heat): "power CPU 6.0 GPU 12.0 DRAM 2.0 W" (W per rail over the real
    window) and "thermal serious" (NSProcessInfo's words, coloured by how far from nominal).
    Nothing for a figure not read."""
    if d.rails_w:
        rails = " ".join(f"{RAIL_NAMES.get(r, r)} {w:.1f}" for r, w in d.rails_w.items())
        text.append(f"\npower {rails} W")
    if d.thermal_state is not None:
        text.append("\nthermal ")
        text.append(d.thermal_state, style=THERMAL_STYLES.get(d.thermal_state, ""))


def gpu_line(d: GpuDevice) -> str:
    """One GPU's line, any vendor: "GPU0 42 % · 2.0 GiB / 141.0 GiB (NVML)"; a card read
    from the kernel's files names its card and driver and adds its power:
    "card1 AMD 37 % · 4.0 GiB / 24.0 GiB · 85 W (amdgpu)"; busy % n/a when not counted
    (Intel), "asleep" for a runtime-suspended GPU left asleep; a GPU with no card (Apple
    Silicon's) says the memory it holds of the machine's, and no total: "GPU Apple 42 % ·
    1.2 GiB · 12.0 W (AGX)"."""
    util = ("asleep" if d.asleep else "n/a" if d.util_percent is None
            else f"{d.util_percent:.0f} %")
    from llmtop.probes.gpu import SOURCE  # loaded by then: `d` is its reading

    if d.source == SOURCE:
        vram = f"{fmt.size(d.memory_used)} / {fmt.size(d.memory_total)}"
        return f"GPU{d.index} {util} · {vram} (NVML)"
    if d.card is None:  # a GPU with no DRM card: Apple Silicon's, its memory the machine's
        parts = [f"GPU {d.name or d.vendor or ''} {util}".replace("  ", " ")]
        if d.memory_used is not None:
            parts.append(fmt.size(d.memory_used))
        if d.power_w is not None:
            parts.append(f"{d.power_w:.1f} W")
        return " · ".join(parts) + f" ({d.driver})"
    parts = [f"{d.card} {d.vendor or ''} {util}".replace("  ", " ")]
    if d.memory_total is not None:
        parts.append(f"{fmt.size(d.memory_used)} / {fmt.size(d.memory_total)}")
    if d.power_w is not None:
        parts.append(f"{d.power_w:.0f} W")
    return " · ".join(parts) + f" ({d.driver})"


cpu_style = _style  # the probe panel's CPU history colours its cells the same way
