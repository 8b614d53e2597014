"""Shared fixtures: a real embedded engine (llama.cpp + the bundled Gemma 3 270M)."""

from __future__ import annotations

import asyncio

import pytest

from llmtop.engines.launcher import EmbeddedProcess

MODEL = "gemma3:270m"


def start_engine() -> EmbeddedProcess:
    """`llmtop engine` as a child process on a free port, ready to answer."""
    proc = EmbeddedProcess()
    asyncio.run(proc.start())
    return proc


@pytest.fixture(scope="session")
def engine_url():
    """One embedded engine shared by the tests that do not care about cold starts."""
    proc = start_engine()
    try:
        yield proc.host
    finally:
        proc.stop()


@pytest.fixture
def fresh_engine():
    """An embedded engine of this test's own: its first request is a cold start."""
    proc = start_engine()
    try:
        yield proc
    finally:
        proc.stop()
