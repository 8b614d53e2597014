"""Test helpers that ship with the package, so tests/ and bench/ share one copy of each.

* `scripted`: a scripted Ollama-API server with known replies and timings, served in a
  thread (`ScriptedUpstream`) or as a process (`python -m llmtop.testing.scripted`), and
  `ServeInThread` for any ASGI app.
"""
