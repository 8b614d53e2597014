"""Shared fixtures: a real embedded engine (llama.cpp + the bundled Gemma 3 270M)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

from llmtop.servers.child import ChildServer, EmbeddedProcess

MODEL = "gemma3:270m"


@pytest.fixture(scope="session", autouse=True)
def own_data_and_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The suite's logs and config files live in its own folders, never the user's: a TUI
    test that starts a sweep writes its log to the default sessions folder
    (platformdirs.user_data_dir), and a user's own config.toml must not change a threshold
    under test. The model cache (user_cache_dir) stays shared: it is 247 MB of files."""
    saved = {k: os.environ.get(k) for k in ("XDG_DATA_HOME", "XDG_CONFIG_HOME")}
    os.environ["XDG_DATA_HOME"] = str(tmp_path_factory.mktemp("data"))
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path_factory.mktemp("config"))
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def running(child: ChildServer) -> Iterator[ChildServer]:
    """Start one of llmtop's child servers, yield it ready, stop it afterwards."""
    asyncio.run(child.start())
    try:
        yield child
    finally:
        child.stop()


@pytest.fixture(scope="session")
def engine_url():
    """One embedded engine shared by the tests that do not care about cold starts."""
    for proc in running(EmbeddedProcess()):
        yield proc.host


@pytest.fixture
def fresh_engine():
    """An embedded engine of this test's own: its first request is a cold start."""
    yield from running(EmbeddedProcess())


@pytest.fixture(scope="session")
def relay(engine_url):
    """One relay child process in front of the shared embedded engine."""
    from llmtop.servers.relay.process import RelayProcess

    yield from running(RelayProcess(engine_url))
