"""Shared fixtures: a real embedded engine (llama.cpp + the bundled Gemma 3 270M)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from llmtop.servers.child import ChildServer, EmbeddedProcess

MODEL = "gemma3:270m"


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
