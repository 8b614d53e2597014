"""llmtop's own servers, and what they share.

* `embedded`: the embedded engine (llama.cpp behind Ollama's API: the app, its request checks,
  the llama.cpp backend and its per-CPU configuration, the bundled model's files);
* `relay`: the SSE relay between a browser (or `RelayEngine`) and an engine;
* `agent`: the probe server on an engine's machine;
* `guard`: what a local server accepts from the web (Host/Origin checks, bodies);
* `child`: one of these servers as a child process of llmtop (start, stop, and a death named
  with its signal and its log).

The clients that llmtop measures through are in `llmtop.engines`; these servers use them (the
relay streams from an engine) and are used only by the composition root and the commands.
"""
