"""What one energy sample costs (`EnergyReader.sample()`): CPU µs and wall µs per sample.

By default over a fake powercap tree shaped like a two-socket server (2 packages, each with
core / uncore / dram subzones, plus psys: 9 counters) in a temporary directory; `--real`
reads this machine's own sources instead (whatever `discover_sources()` finds readable).

    python bench/energy_cost.py [-n 2000] [--real] [--json FILE]

The target: well under 1 ms CPU per sample, so it can ride the probe sampler's 1 s thread
(and a faster one during a request) without changing what the probes measure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from llmtop.probes.energy import EnergyReader, discover_sources

TARGET_CPU_US = 1000.0


def _fake_tree(root: Path) -> None:
    def zone(directory: str, name: str) -> None:
        path = root / directory
        path.mkdir(parents=True)
        (path / "name").write_text(name + "\n")
        (path / "energy_uj").write_text("123456789\n")
        (path / "max_energy_range_uj").write_text("262143328850\n")

    for n in (0, 1):
        zone(f"intel-rapl:{n}", f"package-{n}")
        for m, sub in enumerate(("core", "uncore", "dram")):
            zone(f"intel-rapl:{n}:{m}", sub)
    zone("intel-rapl:2", "psys")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2000, help="samples to time")
    parser.add_argument("--real", action="store_true", help="this machine's own sources")
    parser.add_argument("--json", type=Path, help="write the result here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.real:
            found = discover_sources()
        else:
            _fake_tree(Path(tmp))
            found = discover_sources(Path(tmp), Path(tmp) / "none", platform="linux")
        reader = EnergyReader(found.sources)
        if not reader.infos:
            print("no readable energy source: nothing to time")
            return 0
        cpu_us, wall_us = [], []
        for _ in range(args.n):
            c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
            reader.sample()
            cpu_us.append((time.thread_time_ns() - c0) / 1e3)
            wall_us.append((time.perf_counter_ns() - w0) / 1e3)
    result = {
        "sources": len(reader.infos),
        "cpu_us_p50": statistics.median(cpu_us),
        "cpu_us_max": max(cpu_us),
        "wall_us_p50": statistics.median(wall_us),
        "target_cpu_us": TARGET_CPU_US,
        "met": statistics.median(cpu_us) <= TARGET_CPU_US,
    }
    print(f"{result['sources']} sources: CPU p50 {result['cpu_us_p50']:.1f} µs "
          f"(max {result['cpu_us_max']:.1f}), wall p50 {result['wall_us_p50']:.1f} µs; "
          f"target ≤ {TARGET_CPU_US:.0f} µs CPU: {'met' if result['met'] else 'NOT met'}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
