"""llmtop's local SSE relay: a Starlette app between a browser (or `RelayEngine`) and an
Ollama-API server, so the cost of such a server layer can be measured instead of guessed.

The source document put a FastAPI SSE relay in front of Ollama and measured its cost as
17.8 ms of an 813.9 ms TTFT (docs/method.md, "Server-layer overhead"). This relay is the same
shape, built to add as little as possible (target: ≤ 1 ms median TTFT on loopback) and to say
what it adds: every event carries the relay's own receive stamp.

* `server.create_app(upstream_url)`: the ASGI app (`GET /` page, `POST /api/stream` SSE,
  `GET /api/models`, `GET /api/relay`); its parts are `request` (body validation),
  `upstream` (one aiohttp client session for every upstream call, one call per request,
  failures in llmtop's words), `stream` (NDJSON lines or an OpenAI upstream's SSE → SSE
  frames) and `sse` (the SSE response: pings, send timeout, disconnects).
* `process.RelayProcess`: the relay as a child process; `process.serve_relay(args)`: the
  `llmtop relay` command.
* The client side is `llmtop.engines.relay.RelayEngine`; the scripted upstream used by its
  tests and by bench/relay_overhead.py is `llmtop.testing.scripted`.
"""
