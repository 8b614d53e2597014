"""How many requests an engine serves at once, where the engine reveals it (for a sweep's
environment record).

* llmtop's embedded engine serves one request at a time (its generation lock,
  llmtop/engines/embedded.py).
* Ollama reads `OLLAMA_NUM_PARALLEL` (slots per loaded model) and `OLLAMA_MAX_QUEUE` from
  its own environment (Ollama's FAQ, "How does Ollama handle concurrent requests?");
  its API does not report them, so they are read from the environment of the local server
  process when the OS lets us (`psutil.Process.environ`). Unset means Ollama's default.
"""

from __future__ import annotations

from typing import Any

import psutil

from llmtop.engines.connection import Connection

OLLAMA_PARALLEL_VARS = ("OLLAMA_NUM_PARALLEL", "OLLAMA_MAX_QUEUE", "OLLAMA_MAX_LOADED_MODELS")


def engine_parallelism(conn: Connection) -> dict[str, Any]:
    """{"slots": 1, "source": …} for the embedded engine; for Ollama the parallel variables
    found in its server process's environment (absent ones as "unset (Ollama's default)")
    and the pid read; else {"source": "not revealed: …"}. Never raises."""
    if conn.upstream.name == "embedded":
        return {"slots": 1, "source": "llmtop's embedded engine serves one request at a time"}
    for pid in sorted(conn.engine_pids):
        try:
            process = psutil.Process(pid)
            if "ollama" not in process.name().lower():
                continue  # a runner's child or another server on the port: not Ollama's
            env = process.environ()
        except (psutil.Error, OSError):
            continue
        found: dict[str, Any] = {
            name: env.get(name, "unset (Ollama's default)") for name in OLLAMA_PARALLEL_VARS
        }
        if "OLLAMA_NUM_PARALLEL" in env and env["OLLAMA_NUM_PARALLEL"].strip().isdigit():
            found["slots"] = int(env["OLLAMA_NUM_PARALLEL"])
        return {**found, "source": f"environment of the engine process (pid {pid})"}
    return {
        "source": "not revealed: the engine's API does not report its parallel slots and "
        "no local engine process could be read"
    }
