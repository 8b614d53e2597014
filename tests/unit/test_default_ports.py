"""`llmtop engine` and `llmtop watch` started with their defaults run side by side: the
watch's default port is not the engine's (both were 11435), nor one of the ports `llmtop
engines` probes, where a watch in front of Ollama would be listed as a second Ollama."""

from __future__ import annotations

import argparse

from llmtop.commands import engine
from llmtop.engines.discovery import KNOWN_PORTS
from llmtop.sessions.runners.watch.serving import DEFAULT_LISTEN, split_listen


def test_the_watch_and_the_engine_do_not_share_a_default_port() -> None:
    parser = argparse.ArgumentParser()
    engine.add_arguments(parser)
    engine_port = parser.parse_args([]).port
    _, watch_port = split_listen(DEFAULT_LISTEN)
    assert (engine_port, watch_port) == (11435, 11436)
    assert KNOWN_PORTS[engine_port] == "llmtop engine"
    assert watch_port not in KNOWN_PORTS
