"""The embedded engine: llama.cpp (llama-cpp-python) serving the bundled model behind
Ollama's own API, so llmtop has a real engine to measure when none is installed.

`app` is the Starlette app, `requests` checks Ollama request bodies (the relay checks with it
too), `llama_backend` drives llama.cpp, `llama_config` picks the llama.cpp configuration that
is safe and fastest on this CPU, `model_files` finds the bundled model.
The design and its measurements: `docs/embedded-engine.md` in the repository.
"""
