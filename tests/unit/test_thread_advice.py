"""The remedy for background CPU that competes with the engine says how to give *this*
engine fewer threads: llmtop's `--num-thread` only where the engine's API takes a thread
count (Ollama's `num_thread`); the OpenAI API has none, so llama-server's own `--threads`."""

from __future__ import annotations

from llmtop.engines.connection import Connection
from llmtop.engines.ollama import OllamaEngine
from llmtop.engines.openai import OpenAIEngine
from llmtop.probes.verdict import THREAD_FLAG


def conn(engine, config=None) -> Connection:
    return Connection(engine=engine, model="m", info=None, version=None, engine_config=config)


def test_each_engine_gets_its_own_thread_advice():
    ollama = conn(OllamaEngine("http://127.0.0.1:1"))
    assert ollama.thread_setting is None  # the verdict's default, llmtop's own flag
    assert THREAD_FLAG == "--num-thread {n}"
    server = conn(OpenAIEngine("http://127.0.0.1:1/v1"), {"server": "llama-server"})
    assert server.thread_setting == "restarting llama-server with --threads {n}"
    other = conn(OpenAIEngine("http://127.0.0.1:1/v1"))
    assert "--num-thread" not in other.thread_setting
    assert other.thread_setting.startswith("giving the engine {n} threads")
