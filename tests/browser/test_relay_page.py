"""The relay's page in a real headless Chromium (Playwright, the system's /usr/bin/chromium),
relaying the real embedded engine: the answer must appear while it is still streaming, and the
page must show the TTFT it measured itself.

Needs the Debian package `chromium` and the Python package `playwright` (its own browser
download is never used: `executable_path` points at the system Chromium).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import MODEL

pytestmark = pytest.mark.integration

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

if not CHROMIUM.exists():
    pytest.skip(
        f"{CHROMIUM} is missing: install it with `apt-get install -y chromium` (.ci/run does)",
        allow_module_level=True,
    )
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="pip install playwright (make setup does)"
)


@pytest.fixture(scope="module")
def browser(relay):
    # After `relay`: Playwright's sync API runs an event loop in this thread, and the engine
    # and relay fixtures start their processes with asyncio.run.
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(relay, browser):
    context = browser.new_context()
    page = context.new_page()
    problems: list[str] = []
    requests: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("console", lambda msg: problems.append(f"console {msg.type}: {msg.text}")
            if msg.type == "error" else None)
    page.on("request", lambda req: requests.append(req.url))
    page.goto(relay.url + "/")
    yield page
    context.close()
    assert problems == []
    outside = [u for u in requests if not u.startswith(relay.url)]
    assert outside == [], f"the page loaded something from elsewhere: {outside}"


def test_the_model_field_is_prefilled_with_the_upstreams_model(page):
    page.wait_for_function("() => document.getElementById('model').value !== ''", timeout=10_000)
    assert page.input_value("#model") == MODEL
    assert page.text_content("#status") == "idle"


def test_think_is_disabled_for_a_model_that_does_not_think(page):
    # the embedded engine's /api/show lists only "completion" for its model (newcomer row 30:
    # the box was offered, and every think request came back 400)
    page.wait_for_function("() => document.getElementById('think').disabled", timeout=10_000)
    assert page.is_checked("#think") is False
    assert "does not think" in (page.get_attribute("#think-label", "title") or "")


def test_first_token_shows_before_the_stream_ends_and_ttft_is_shown(page):
    page.wait_for_function("() => document.getElementById('model').value !== ''", timeout=10_000)
    page.fill("#num_predict", "120")
    page.fill("#prompt", "Write a long story about a lighthouse keeper and the sea.")
    page.click("#send")

    # While the status still says streaming, the answer is already on the page.
    page.wait_for_function(
        "() => document.getElementById('answer').textContent.length > 0"
        " && document.getElementById('status').textContent === 'streaming…'",
        timeout=120_000,
    )
    ttft_shown = page.text_content("#ttft")
    assert re.fullmatch(r"\d+\.\d ms", ttft_shown or ""), ttft_shown

    page.wait_for_function(
        "() => window.llmtopRun && window.llmtopRun.outcome !== null", timeout=120_000
    )
    run = page.evaluate("window.llmtopRun")
    assert run["outcome"] == "done", page.text_content("#status")
    assert 0 < run["firstTokenMs"] <= run["firstRenderMs"] < run["doneMs"]
    assert run["statusAtFirstRender"] == "streaming…"
    assert run["chunks"] >= 2
    assert page.text_content("#status").startswith("done")
    assert page.text_content("#answer").strip()
    assert re.fullmatch(r"\d+\.\d ms", page.text_content("#e2e") or "")
    tokens = page.text_content("#tokens")
    assert tokens and tokens.isdigit() and int(tokens) == run["stats"]["eval_count"] > 0
    assert float(page.text_content("#ttft").split()[0]) == pytest.approx(
        run["firstTokenMs"], abs=0.06
    )


def test_an_unknown_model_shows_the_relays_error(page):
    page.wait_for_function("() => document.getElementById('model').value !== ''", timeout=10_000)
    page.fill("#model", "no-such-model:1b")
    page.fill("#prompt", "hi")
    page.click("#send")
    page.wait_for_function(
        "() => window.llmtopRun && window.llmtopRun.outcome !== null", timeout=30_000
    )
    status = page.text_content("#status") or ""
    assert status.startswith("error:") and "no-such-model:1b" in status and "not found" in status
