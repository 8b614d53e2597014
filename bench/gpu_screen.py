"""The main screen on the machine it runs on, with its real probes: a check for a machine with
a GPU (the lent device machine), where no test can look.

The engine is the TUI tests' scripted one (tests/tui/fakes.py: known text and timings), so
only the machine panel and the header read the real machine; the probes are llmtop's own
sampler (CPU, memory, apps, NVIDIA GPUs through NVML). One request is sent, then the screen
is saved as SVG at each size, with the panel's text and the probe cost printed.

    PYTHONPATH=. python bench/gpu_screen.py --out DIR
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from llmtop.tui.app import make_app
from llmtop.tui.state.settings import TuiSettings
from tests.tui.fakes import fake_connection, wait_for
from tests.tui.test_fake_engine import done, send

SIZES = ((120, 40), (80, 24), (200, 50))


async def shoot(out: Path, size: tuple[int, int]) -> None:
    settings = TuiSettings(engine="fake", options={"num_predict": 8},
                           log_path=str(out / f"s{size[0]}.jsonl"), probes=True)
    app = make_app(settings, connection=fake_connection())
    async with app.run_test(size=size) as pilot:
        await send(pilot, app, "hello")
        await wait_for(pilot, lambda: done(app), what="request done")
        first = app.latest_probe
        await wait_for(pilot, lambda: app.latest_probe is not first, timeout_s=5,
                       what="a probe sample after the request")
        await pilot.pause(0.3)
        sample = app.latest_probe
        name = f"screen_{size[0]}x{size[1]}.svg"
        app.save_screenshot(name, str(out))
        print(f"--- {size}: saved {name}; probe cost {getattr(sample, 'cost_ms', None)} ms")
        gpu = getattr(sample, "gpu", None)
        print(f"gpu: {gpu}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for size in SIZES:
        asyncio.run(shoot(out, size))


if __name__ == "__main__":
    main()
