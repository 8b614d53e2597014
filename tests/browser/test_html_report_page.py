"""The HTML report of a real run (a short bench on the real embedded engine, `--format html`)
in a real headless Chromium (Playwright driving Debian's /usr/bin/chromium): the plots render
(plotly drew its SVG, with the traces' markers), nothing is fetched from anywhere, no script
error, and a screenshot of each plot is not blank.

"Not blank" is judged on the screenshot's pixels with Pillow: a plot has thousands of pixels
off its background colour (axes, grid, markers, text); a blank or failed one has none.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from tests.browser.test_relay_page import CHROMIUM, CHROMIUM_ARGS

pytestmark = pytest.mark.integration

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="pip install playwright (make setup does)"
)
Image = pytest.importorskip("PIL.Image", reason="pip install pillow (make setup does)")

if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is missing: `apt-get install -y chromium`", allow_module_level=True)


@pytest.fixture(scope="module")
def report(engine_url, tmp_path_factory) -> Path:
    """A real bench's HTML report (5 requests of 32 tokens, 8 output tokens each: small, for
    a shared 2-core machine)."""
    folder = tmp_path_factory.mktemp("html")
    out = folder / "bench.html"
    p = subprocess.run(
        [sys.executable, "-m", "llmtop", "bench", "--engine", "embedded", "--host", engine_url,
         "--requests", "5", "--warmup", "1", "--prompt-tokens", "32", "--max-tokens", "8",
         "--num-ctx", "2048", "--log", str(folder / "bench.jsonl"), "--no-cache",
         "--preflight-duration", "0", "--format", "html", "--out", str(out)],
        capture_output=True, text=True, check=False, timeout=840)
    assert p.returncode in (0, 1), p.stderr  # 1: the shared machine made the run drift
    return out


def non_background_pixels(png: bytes) -> int:
    """Pixels whose colour differs from the image's most common colour (its background)."""
    img = Image.open(io.BytesIO(png)).convert("RGB")
    colours = img.getcolors(maxcolors=1 << 24)
    background = max(colours)[1]
    return sum(n for n, c in colours if c != background)


@pytest.mark.timeout(900)
def test_the_plots_of_a_real_run_render_in_chromium(report):
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            problems: list[str] = []
            fetched: list[str] = []
            page.on("pageerror", lambda exc: problems.append(str(exc)))
            page.on("request", lambda req: fetched.append(req.url))
            page.goto(report.as_uri())
            page.wait_for_selector("#series-1 .main-svg", timeout=30_000)
            assert page.locator(".plotly-graph-div").count() == 2  # the series and the ITL
            # the series plot drew markers for the ok requests, the ITL plot drew its bars
            assert page.locator("#series-1 .scatterlayer .point").count() >= 3
            assert page.locator("#itl .barlayer .point").count() >= 1
            assert page.locator("table").count() >= 3  # results, statistics, environment
            for plot_id in ("series-1", "itl"):
                shot = page.locator(f"#{plot_id}").screenshot()
                assert non_background_pixels(shot) > 2000, f"{plot_id} looks blank"
            page.screenshot(path=str(report.with_suffix(".png")), full_page=True)
        finally:
            browser.close()
    assert problems == []
    assert [u for u in fetched if not u.startswith("file://")] == []
