"""The composition root's rules that need no engine: model names compared as Ollama compares
them (case-insensitive; no tag means `:latest`), and the bundled model preferred."""

from __future__ import annotations

import pytest

from llmtop.connect import _choose_model, _same_model
from llmtop.engines.base import EngineError
from llmtop.engines.events import FailureKind


@pytest.mark.parametrize(("a", "b", "same"), [
    ("qwen2.5", "qwen2.5:latest", True),
    ("Qwen2.5:7B", "qwen2.5:7b", True),
    ("library/qwen2.5", "library/qwen2.5:latest", True),
    ("host:5000/ns/model", "host:5000/ns/model:latest", True),  # a registry port is no tag
    ("qwen2.5:7b", "qwen2.5:14b", False),
    ("qwen2.5", "qwen2.5:7b", False),
])
def test_model_names_compare_as_ollama_compares_them(a: str, b: str, same: bool) -> None:
    assert _same_model(a, b) is same


class Installed:
    """A client whose `/api/tags` lists `names` (all `_choose_model` asks of it)."""

    host = "http://127.0.0.1:11434"
    name = "ollama"

    def __init__(self, *names: str) -> None:
        self.names = list(names)

    async def list_models(self) -> list[str]:
        return self.names


async def test_the_engine_spelling_is_used() -> None:
    client = Installed("Qwen2.5:latest", "gemma3:270m")
    assert await _choose_model(client, "qwen2.5") == "Qwen2.5:latest"  # type: ignore[arg-type]
    assert await _choose_model(client, None) == "gemma3:270m"  # type: ignore[arg-type]
    assert await _choose_model(Installed("b", "a"), None) == "b"  # type: ignore[arg-type]


async def test_a_missing_model_lists_what_is_installed() -> None:
    with pytest.raises(EngineError) as err:
        await _choose_model(Installed("a:1", "b:2"), "c")  # type: ignore[arg-type]
    failure = err.value.failure
    assert failure.kind == FailureKind.MODEL_NOT_FOUND
    assert failure.message == "model 'c' not found at http://127.0.0.1:11434 (installed: a:1, b:2)"


async def test_a_host_the_user_gave_is_never_replaced_by_the_embedded_engine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from llmtop.connect import connect
    from llmtop.servers.child import free_port

    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(EngineError) as err:
        await connect("auto", host=dead)
    failure = err.value.failure
    assert failure.kind == FailureKind.UNREACHABLE
    assert failure.message.startswith(f"no engine answers at {dead} (from --host)")
    # new-user pass N19: "or pass --engine embedded" with the address still given failed again
    assert "embedded engine instead, drop --host (llmtop then starts it)" in failure.remedy
    monkeypatch.setenv("OLLAMA_HOST", dead)
    with pytest.raises(EngineError) as err:
        await connect("auto")
    assert err.value.failure.message.startswith(f"no engine answers at {dead} (from OLLAMA_HOST)")
    # a name that does not resolve is said as such (.invalid never resolves: RFC 2606)
    monkeypatch.delenv("OLLAMA_HOST")
    with pytest.raises(EngineError) as err:
        await connect("auto", host="http://nosuchhost.invalid:11434")
    assert err.value.failure.message.startswith(
        "no engine answers at http://nosuchhost.invalid:11434 (from --host): the name "
        "nosuchhost.invalid does not resolve (DNS: ")


def test_run_with_a_dead_host_exits_3_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    from llmtop.servers.child import free_port

    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    dead = f"http://127.0.0.1:{free_port()}"
    p = subprocess.run([sys.executable, "-m", "llmtop", "run", "--host", dead, "--prompt", "hi"],
                       capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 3, p.stderr  # ExitCode.ENGINE_UNREACHABLE, no embedded engine run
    assert f"llmtop: no engine answers at {dead} (from --host)" in p.stderr
    assert p.stdout == ""


class Embedded(Installed):
    name = "embedded"


async def test_a_typo_is_answered_with_the_closest_name_and_advice_for_the_engine() -> None:
    with pytest.raises(EngineError) as err:
        await _choose_model(Embedded("gemma3:270m"), "gemma3:27om")  # type: ignore[arg-type]
    failure = err.value.failure
    assert failure.message == ("model 'gemma3:27om' not found in the embedded engine "
                               "(installed: gemma3:270m); did you mean gemma3:270m?")
    assert "ollama pull" not in failure.remedy and "--model-path" in failure.remedy
    ollama = Installed("qwen2.5:7b", "llama3.2:3b")
    with pytest.raises(EngineError) as err:
        await _choose_model(ollama, "qwen2.5:7")  # type: ignore[arg-type]
    assert err.value.failure.message.endswith("did you mean qwen2.5:7b?")
    assert err.value.failure.remedy.startswith("pull it with `ollama pull qwen2.5:7`")
    with pytest.raises(EngineError) as err:
        await _choose_model(ollama, "mistral")  # type: ignore[arg-type]
    assert "did you mean" not in err.value.failure.message  # nothing close enough


def test_descendants_are_the_whole_tree_of_real_processes() -> None:
    # new-user pass N12: the embedded engine's self-test trials (its children) were counted
    # as another engine in the preflight of the bench that started it
    import subprocess
    import sys as _sys

    import psutil as _psutil

    from llmtop.connect import descendants

    code = ("import subprocess, sys; "
            "subprocess.run([sys.executable, '-c', 'import time; time.sleep(60)'])")
    parent = subprocess.Popen([_sys.executable, "-c", code])
    proc = _psutil.Process(parent.pid)
    try:
        for _ in range(400):  # until the child's interpreter has started its own child
            if proc.children(recursive=True):
                break
            _psutil.wait_procs([proc], timeout=0.05)
        expected = {p.pid for p in proc.children(recursive=True)}
        assert len(expected) == 1  # the child's own child, this test's grandchild
        assert descendants([parent.pid]) == expected
        assert descendants([2**22 + 12345]) == set()  # above pid_max: no such process
    finally:
        for p in [*proc.children(recursive=True), proc]:
            p.kill()
        parent.wait()


def test_descendants_from_a_procfs_tree(tmp_path) -> None:
    from llmtop.connect import descendants

    def task(pid: int, tid: int, children: str | None) -> None:
        folder = tmp_path / str(pid) / "task" / str(tid)
        folder.mkdir(parents=True)
        if children is not None:
            (folder / "children").write_text(children)

    (tmp_path / "self" / "task").mkdir(parents=True)
    task(10, 10, "11 ")
    task(10, 12, "13 14 ")  # a child started by another thread of 10
    task(11, 11, "")
    task(13, 13, "15 ")
    task(14, 14, "")
    task(15, 15, "")
    assert descendants([10], proc=str(tmp_path)) == {11, 13, 14, 15}
    assert descendants([99], proc=str(tmp_path)) == set()  # gone


class Counted:
    """ASGI middleware: how many GET requests each path got (`asked`); with `version` set,
    `/api/version` answers that object instead of the app (an embedded engine's answer)."""

    def __init__(self, app: object, version: dict[str, object] | None = None) -> None:
        self.app = app
        self.version = version
        self.asked: dict[str, int] = {}

    async def __call__(self, scope, receive, send) -> None:
        path = scope.get("path", "")
        if scope.get("type") == "http" and scope.get("method") == "GET":
            self.asked[path] = self.asked.get(path, 0) + 1
            if path == "/api/version" and self.version is not None:
                from starlette.responses import JSONResponse

                await JSONResponse(self.version)(scope, receive, send)
                return
        await self.app(scope, receive, send)  # type: ignore[operator]


async def test_auto_asks_an_ollama_its_version_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """auto at a given address decides from one look: /api/version and /v1/models asked
    together, each once (it was /api/version twice in a row: once to rule out an
    OpenAI-compatible server, once more to choose Ollama)."""
    from llmtop.connect import connect
    from llmtop.testing.scripted import VERSION, ServeInThread, create_scripted_app

    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    app = Counted(create_scripted_app())
    with ServeInThread(app) as url:
        conn = await connect("auto", host=url, model="ok")
        try:
            assert (conn.engine.name, conn.version) == ("ollama", VERSION)
            assert app.asked["/api/version"] == 1
            assert app.asked.get("/v1/models", 0) <= 1
        finally:
            await conn.close()


async def test_an_embedded_engine_at_an_address_is_asked_once_for_version_and_config() -> None:
    """engine embedded at a running engine's address: its `/api/version` answer gives both
    the version and the llama.cpp configuration (it was asked twice, once for each)."""
    from llmtop.connect import connect
    from llmtop.testing.scripted import ServeInThread, create_scripted_app

    config = {"use_extra_bufts": True, "n_threads": 2}
    app = Counted(create_scripted_app(), version={"version": "0.1.0", "engine": "llmtop-embedded",
                                                  "llama_config": config})
    with ServeInThread(app) as url:
        conn = await connect("embedded", host=url, model="ok")
        try:
            assert (conn.engine.name, conn.version) == ("embedded", "0.1.0")
            assert conn.engine_config == config
            assert app.asked["/api/version"] == 1
        finally:
            await conn.close()


async def test_auto_finds_an_openai_server_with_one_version_question(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """auto at an OpenAI-compatible server: Ollama's route asked once (a 404), the server
    chosen from the same look."""
    from llmtop.connect import connect
    from llmtop.testing.scripted import ServeInThread
    from llmtop.testing.scripted_openai import create_openai_app

    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    app = Counted(create_openai_app("llama-server"))
    with ServeInThread(app) as url:
        conn = await connect("auto", host=url, model="llama-server")
        try:
            assert conn.engine.name == "auto → openai: llama-server"
            assert app.asked["/api/version"] == 1
        finally:
            await conn.close()
