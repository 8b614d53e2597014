"""The user's environment cannot mislead llmtop about where the engine is: proxy variables
never touch a loopback engine, and a malformed OLLAMA_HOST never crashes it (the `ollama`
package parses that variable when it is imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from llmtop.testing.scripted import ScriptedUpstream, ServeInThread


def bad_gateway() -> Starlette:
    """A proxy that answers 502 to everything (and counts what reached it)."""
    seen: list[str] = []

    async def any_path(request):
        seen.append(str(request.url))
        return PlainTextResponse("bad gateway", status_code=502)

    app = Starlette(routes=[Route("/{path:path}", any_path, methods=["GET", "POST", "CONNECT"])])
    app.state.seen = seen
    return app


def llmtop(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llmtop", *argv], capture_output=True,
                          text=True, check=False, timeout=60, env=env)


def test_a_failing_proxy_never_sees_a_loopback_engine(tmp_path) -> None:
    proxy_app = bad_gateway()
    with ScriptedUpstream() as engine, ServeInThread(proxy_app) as proxy:
        env = {**os.environ, "HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "ALL_PROXY": proxy,
               "http_proxy": proxy}
        p = llmtop("--host", engine.url, "run", "--model", "ok", "--prompt", "hi", "--json",
                   "--log", str(tmp_path / "s.jsonl"), env=env)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    # the scripted engine answered ("Hel" "lo" "!"), not an embedded one started instead
    assert (out["engine"], out["text"], out["host"]) == ("ollama", "Hello!", engine.url)
    assert proxy_app.state.seen == []


def test_a_malformed_ollama_host_is_one_line_not_a_traceback(tmp_path) -> None:
    env = {**os.environ, "OLLAMA_HOST": "[::1"}
    p = llmtop("run", "--prompt", "hi", env=env)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        ("llmtop: OLLAMA_HOST='[::1' cannot be used: '[::1' is not a host name or an IP address "
        "(e.g. http://127.0.0.1:11434, localhost:11434 or [::1]:11434)")]
    # with --host given, the variable is never read: the scripted engine answers
    with ScriptedUpstream() as engine:
        p = llmtop("--host", engine.url, "run", "--model", "ok", "--prompt", "hi", "--json",
                   "--log", str(tmp_path / "t.jsonl"), env=env)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["text"] == "Hello!"
