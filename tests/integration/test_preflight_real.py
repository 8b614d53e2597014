"""Real processes: `llmtop preflight` must turn NOISY while a CPU burner runs, and name it, and
QUIET again once it is gone.

The burner is `python -c "while True: pass"` started through a symlink named `llmtop-burner`:
a process's name (Linux comm, macOS p_comm) is the name it was executed under, and processes.py
groups an uncatalogued name as its own app ("python3.11" would instead be a generic interpreter
name, grouped with every other Python process on the machine, pytest included).

CI machines have background load of their own. The check is measured first; when the machine
is already NOISY without the burner, the test is skipped with the findings rather than the
rule loosened. No engine is involved: --host points at a closed loopback port.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmtop.servers.child import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

NAME = "llmtop-burner"
TRIES = 3  # a quiet check gets a few chances: a shared machine has bursts


def _command() -> list[str]:
    """`python -m llmtop preflight`."""
    return [sys.executable, "-m", "llmtop", "preflight"]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """No user config file (defaults apply), no OLLAMA_HOST."""
    e = {k: v for k, v in os.environ.items() if k not in ("LLMTOP_CONFIG", "OLLAMA_HOST")}
    e["XDG_CONFIG_HOME"] = str(tmp_path_factory.mktemp("config"))
    return e


def preflight(env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    host = f"http://127.0.0.1:{free_port()}"  # closed: no engine answers
    p = subprocess.run(
        [*_command(), "--json", "--duration", "2", "--host", host],
        check=False, capture_output=True, text=True, env=env, timeout=60,
    )
    assert p.returncode in (0, 1, 2), p.stderr
    data = json.loads(p.stdout)
    assert data["engine"]["checked"] is False
    return p.returncode, data


def summary(data: dict[str, Any]) -> str:
    return "; ".join(f"{f['level']} {f['code']}: {f['message']}" for f in data["findings"])


def names_burner(data: dict[str, Any]) -> bool:
    return any(NAME in f["message"] for f in data["findings"])


def quiet_or_skip(env: dict[str, str], when: str) -> dict[str, Any]:
    """Preflight until QUIET (up to TRIES); skip when the machine stays noisy without us."""
    for _ in range(TRIES):
        code, data = preflight(env)
        assert not names_burner(data), summary(data)
        if code == 0:
            return data
        time.sleep(1.0)
    pytest.skip(f"machine NOISY {when} without the burner: {summary(data)}")


@pytest.fixture
def burner_link(tmp_path: Path) -> Path:
    link = tmp_path / NAME
    try:
        link.symlink_to(os.path.realpath(sys.executable))
    except (OSError, NotImplementedError):
        pytest.skip("symlinks unavailable: cannot give the burner a distinctive name")
    return link


@pytest.fixture
def start_burner(burner_link: Path) -> Iterator[Any]:
    children: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        child = subprocess.Popen(
            [str(burner_link), "-c", "# llmtop-burner\nwhile True: pass"], stdin=subprocess.DEVNULL
        )
        children.append(child)
        return child

    yield start
    for child in children:
        child.kill()
        child.wait(timeout=10)


def test_burner_makes_preflight_noisy_and_named(env: dict[str, str], start_burner: Any) -> None:
    baseline = quiet_or_skip(env, "before the test")
    assert baseline["verdict"] == "QUIET" and baseline["exit_code"] == 0

    child = start_burner()
    time.sleep(0.3)
    code, data = preflight(env)
    assert code == 1, summary(data)
    assert data["verdict"] == "NOISY"
    busy = [f for f in data["findings"] if f["code"] == "app-busy" and NAME in f["message"]]
    assert len(busy) == 1, summary(data)
    assert busy[0]["level"] in ("warn", "fail")
    assert busy[0]["value"] > 50.0  # it burns a core: ~100 % of one core
    assert busy[0]["message"].startswith(f"{NAME} is using ")
    assert NAME in [a["app"] for a in data["apps"]]

    child.kill()
    child.wait(timeout=10)
    after = quiet_or_skip(env, "after the burner was killed")
    assert after["exit_code"] == 0 and not names_burner(after)
