"""`llmtop engines`' discovery (llmtop/engines/discovery.py, llmtop/probes/listening.py):
each kind of engine told apart by its own routes, on ports the test chooses (the scripted
Ollama and OpenAI servers on free ports), what a non-engine and a silent listener are, the
socket scan's hints, and the command's table, JSON and exit codes."""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import socket
from collections import namedtuple
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from llmtop.commands import engines as engines_command
from llmtop.engines import discovery
from llmtop.engines.discovery import Discovery, FoundEngine, Hint, classify, discover
from llmtop.exitcodes import ExitCode
from llmtop.probes.engine_identity import Candidate
from llmtop.probes.listening import ScanSources, reach, scan
from llmtop.servers.child import free_port
from llmtop.testing.scripted import VERSION, ScriptedUpstream, ServeInThread
from llmtop.testing.scripted_openai import MODELS, ScriptedOpenAI

pytestmark = pytest.mark.timeout(60)


def found(ports: list[int], **kwargs) -> Discovery:
    return asyncio.run(discover(ports, **kwargs))


def only(result: Discovery) -> FoundEngine:
    assert len(result.engines) == 1, result
    return result.engines[0]


# ------------------------------------------------------------ each kind, by its own routes


def test_ollama_with_its_installed_and_loaded_models() -> None:
    ps = {"models": [{"name": "timed", "model": "timed"}]}
    with ScriptedUpstream(ps=ps) as up:
        engine = only(found([up.port]))
    assert engine.kind == "ollama"
    assert engine.version == VERSION  # "0.0.0-scripted", its /api/version
    assert engine.url == f"http://127.0.0.1:{up.port}"
    assert engine.loaded == ("timed",)  # /api/ps
    assert engine.available == ("ok", "timed", "thinking", "slow")  # /api/tags: INSTALLED
    assert engine.model == "timed"  # the loaded one first
    assert engine.flags() == f"--engine ollama --host http://127.0.0.1:{up.port} --model timed"
    assert engine.found_by == f"port {up.port} (asked for)"


def test_an_ollama_with_nothing_loaded_says_none_loaded_not_unknown() -> None:
    with ScriptedUpstream() as up:  # /api/ps: {"models": []}
        engine = only(found([up.port]))
    assert engine.loaded == ()
    assert engine.model == "ok"  # the first installed
    assert engines_command.models_cell(engine) == "none loaded · 4 available"


@pytest.mark.parametrize(("kind", "version", "loaded", "available"), [
    # llama-server, vLLM, llama-cpp-python serve what /v1/models lists: loaded
    ("llama-server", "b1-scripted", MODELS, None),
    ("vllm", "0.0.0-scripted", MODELS, None),
    ("llama-cpp-python", "0.0.0", MODELS, None),
    # LM Studio's /api/v0/models (scripted: an empty list) says what is loaded: nothing
    ("lm-studio", None, (), ()),
    # a server that says nothing of itself: its list is what it offers, not what is loaded
    ("openai-compatible", None, None, MODELS),
])
def test_openai_compatible_kinds(kind: str, version: str | None, loaded: tuple | None,
                                 available: tuple | None) -> None:
    with ScriptedOpenAI(kind) as up:
        engine = only(found([up.port]))
    assert (engine.kind, engine.version) == (kind, version)
    assert (engine.loaded, engine.available) == (loaded, available)
    host = f"http://127.0.0.1:{up.port}/v1"
    assert engine.host == host and engine.api == "openai"
    model = f" --model {MODELS[0]}" if (loaded or available) else ""
    assert engine.flags() == f"--engine openai --host {host}{model}"


def test_two_engines_and_a_closed_port_at_once() -> None:
    closed = free_port()  # nothing listens: refused, not listed, not an "other"
    with ScriptedUpstream() as ollama, ScriptedOpenAI("llama-server") as server:
        result = found([server.port, closed, ollama.port])
    assert [e.kind for e in result.engines] == sorted(
        ["ollama", "llama-server"], key=lambda k: {"ollama": ollama.port,
                                                   "llama-server": server.port}[k])
    assert result.others == ()
    assert result.probed == tuple(sorted([server.port, closed, ollama.port]))


# ------------------------------------------------------------ the signatures, exactly


@pytest.mark.parametrize(("answers", "expected"), [
    ({"/api/extra/version": {"result": "KoboldCpp", "version": "1.98"},
      "/api/version": {"version": "0.1"}}, ("koboldcpp", "1.98")),  # Kobold before Ollama
    ({"/api/version": {"version": "0.27.0", "engine": "llmtop-embedded"}},
     ("llmtop-embedded", "0.27.0")),
    ({"/api/version": {"version": "0.12.3"}}, ("ollama", "0.12.3")),
    ({"/props": {"build_info": "b6500-0c1e570"}, "/v1/models": {"data": []}},
     ("llama-server", "b6500-0c1e570")),
    ({"/api/v1/models": {"models": []}}, ("lm-studio", None)),  # LM Studio 0.4's v1 API
    ({"/get_model_info": {"model_path": "qwen"}, "/version": {"version": "0.4.9"}},
     ("sglang", "0.4.9")),
    ({"/version": {"version": "0.6.3"}, "/v1/models": {"data": [{"id": "m"}]}},
     ("vllm", "0.6.3")),
    ({"/v1/models": {"data": [{"id": "m", "owned_by": "vllm"}]}}, ("vllm", None)),
    ({"/v1/models": {"data": [{"id": "m", "owned_by": "llamacpp"}]}}, ("llama-server", None)),
    # a web app's /version with no model list is no engine
    ({"/version": {"version": "2.0.0"}}, None),
    ({"/v1/models": {"data": [{"id": "m", "owned_by": "someone"}]}}, None),  # identify's
    ({}, None),
])
def test_classify(answers: dict, expected: tuple | None) -> None:
    assert classify(answers) == expected


def _app(routes: dict[str, object]) -> Starlette:
    return Starlette(routes=[Route(path, lambda _r, a=answer: JSONResponse(a))
                             for path, answer in routes.items()])


def test_lm_studio_v0_states_split_loaded_from_available() -> None:
    data = [{"id": "qwen3-4b", "state": "loaded"}, {"id": "gemma-3-1b", "state": "not-loaded"}]
    with ServeInThread(_app({"/api/v0/models": {"object": "list", "data": data},
                             "/v1/models": {"data": [{"id": "qwen3-4b"}]}})) as url:
        engine = only(found([int(url.rsplit(":", 1)[1])]))
    assert engine.kind == "lm-studio"
    assert engine.loaded == ("qwen3-4b",)
    assert engine.available == ("qwen3-4b", "gemma-3-1b")


def test_an_answer_past_its_bounds_is_set_aside_and_said() -> None:
    long_version = "9" * (discovery.MAX_LABEL_CHARS + 1)
    models = [{"name": "ok"}, {"name": "x" * (discovery.MAX_LABEL_CHARS + 1)}, {"name": 5}]
    with ServeInThread(_app({"/api/version": {"version": long_version},
                             "/api/tags": {"models": models},
                             "/api/ps": {"models": "not a list"}})) as url:
        engine = only(found([int(url.rsplit(":", 1)[1])]))
    assert engine.kind == "ollama" and engine.version is None
    assert engine.available == ("ok",)
    assert engine.loaded is None  # /api/ps said nothing usable: unknown, not "none loaded"
    assert engine.notes == (
        (f"version: {discovery.MAX_LABEL_CHARS + 1} characters, over "
        f"{discovery.MAX_LABEL_CHARS}: set aside"),
        "/api/ps: not a model list, set aside",
        (f"/api/tags: 2 entries without a usable name (not a text of 1 to "
        f"{discovery.MAX_LABEL_CHARS} characters), left out"),
    )


def test_a_web_server_that_is_no_engine_is_named_apart() -> None:
    with ServeInThread(_app({"/version": {"version": "2.0.0"}})) as url:
        result = found([int(url.rsplit(":", 1)[1])])
    assert result.engines == ()
    assert result.others == ((f"{url}: accepts connections but answers none of the engines' "
                             "routes (not an LLM engine, or one llmtop does not know)"),)


def _padded(_request) -> Response:
    """An Ollama /api/version 3 MiB long (padding): past MAX_BODY_BYTES (2 MiB)."""
    return Response(b'{"version": "1", "pad": "' + b" " * (3 * 2**20) + b'"}',
                    media_type="application/json")


def _bomb(_request) -> Response:
    """20 MiB of spaces gzipped to ~20 KB, sent though llmtop asked for no compression."""
    return Response(gzip.compress(b" " * (20 * 2**20)), media_type="application/json",
                    headers={"Content-Encoding": "gzip"})


@pytest.mark.parametrize("reply", [_padded, _bomb])
def test_a_reply_past_the_body_bound_is_no_answer(reply) -> None:
    with ServeInThread(Starlette(routes=[Route("/api/version", reply)])) as url:
        result = found([int(url.rsplit(":", 1)[1])])
    assert result.engines == ()
    assert result.others == ((f"{url}: accepts connections but answers none of the engines' "
                              "routes (not an LLM engine, or one llmtop does not know)"),)


@contextmanager
def silent_listener() -> Iterator[int]:
    """A socket that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield sock.getsockname()[1]


def test_a_listener_that_never_answers_costs_the_probe_timeout_not_a_hang() -> None:
    with silent_listener() as port:
        result = found([port])
    assert result.engines == ()
    assert result.others == ((f"http://127.0.0.1:{port}: accepts connections but answers none "
                             "of the engines' routes (not an LLM engine, or one llmtop does "
                             "not know)"),)
    # the routes are asked in parallel, each given PROBE_TIMEOUT_S (0.5 s): well inside the
    # DEADLINE_S (2 s) by which discover returns in any case
    assert result.elapsed_ms < discovery.DEADLINE_S * 1000 + 1000


# ------------------------------------------------------------ the socket scan's hints


def test_an_engine_socket_on_its_own_port_is_probed_and_named() -> None:
    with ScriptedOpenAI("llama-server") as up:
        def hints() -> tuple[list[Hint], str | None]:
            return [Hint("127.0.0.1", up.port, 4242, "llama.cpp", True)], "a note"
        result = found([], scan=hints)
    engine = only(result)
    assert (engine.pid, engine.process) == (4242, "llama.cpp")
    assert engine.found_by == "listening socket of llama.cpp (pid 4242)"
    assert result.notes == ("a note",)
    assert result.probed == (up.port,)


def test_a_known_port_is_named_by_its_sockets_owner() -> None:
    with ScriptedUpstream() as up:
        def hints() -> tuple[list[Hint], str | None]:
            return [Hint("127.0.0.1", up.port, 812, "ollama")], None  # not flagged an engine
        engine = only(found([up.port], scan=hints))
    assert (engine.pid, engine.process) == (812, "ollama")
    assert engine.found_by == f"port {up.port} (asked for)"


def test_a_scan_that_fails_is_a_note_not_an_error() -> None:
    def broken() -> tuple[list[Hint], str | None]:
        raise psutil.AccessDenied()

    result = found([free_port()], scan=broken)
    assert result.engines == ()
    assert result.notes == ("the socket scan failed (AccessDenied): only the usual ports",)


Conn = namedtuple("Conn", "laddr status pid")
Addr = namedtuple("Addr", "ip port")


def test_listening_scan_reads_owners_wildcards_and_hidden_sockets() -> None:
    conns = [
        Conn(Addr("0.0.0.0", 8080), psutil.CONN_LISTEN, 900),  # llama-server, every interface
        Conn(Addr("::", 8080), psutil.CONN_LISTEN, 900),  # its IPv6 twin: another address
        Conn(Addr("127.0.0.1", 5432), psutil.CONN_LISTEN, 77),  # postgres: named, no engine
        Conn(Addr("127.0.0.1", 11434), psutil.CONN_LISTEN, None),  # another user's
        Conn(Addr("127.0.0.1", 40000), psutil.CONN_ESTABLISHED, 900),  # not listening
    ]
    candidates = [Candidate(900, "llama.cpp", 1000, None),
                  Candidate(950, "vLLM", 1001, 8001)]  # its socket hidden: --port stands in
    sources = ScanSources(connections=lambda: conns, candidates=lambda: candidates,
                          name=lambda pid: {77: "postgres"}[pid], root=lambda: False)
    result = scan(sources)
    got = [(s.address, s.port, s.pid, s.process, s.engine, s.how) for s in result.listeners]
    assert got == [
        ("127.0.0.1", 8080, 900, "llama.cpp", True, "listening socket"),
        ("::1", 8080, 900, "llama.cpp", True, "listening socket"),
        ("127.0.0.1", 5432, 77, "postgres", False, "listening socket"),
        ("127.0.0.1", 11434, None, None, False, "listening socket"),
        ("127.0.0.1", 8001, 950, "vLLM", True, "--port on its command line"),
    ]
    assert result.note == ("the owner of 1 listening socket is not shown (another user's "
                           "process): run as root to name it; the usual ports are probed anyway")
    as_root = scan(ScanSources(connections=lambda: conns, candidates=lambda: candidates,
                               name=lambda pid: {77: "postgres"}[pid], root=lambda: True))
    assert as_root.note == ("the owner of 1 listening socket is not shown (a process in another "
                            "PID namespace: a container); the usual ports are probed anyway")


def test_listening_scan_without_the_socket_table() -> None:
    def denied() -> list:
        raise psutil.AccessDenied()

    result = scan(ScanSources(connections=denied, candidates=list))
    assert result.listeners == ()
    assert result.note == ("the socket table is not readable by this user (AccessDenied): run "
                           "as root to see which process listens where")


@pytest.mark.parametrize(("bound", "reached"), [
    ("0.0.0.0", "127.0.0.1"), ("::", "::1"), ("127.0.0.1", "127.0.0.1"),
    ("192.168.1.5", "192.168.1.5"), ("not-an-ip", None)])
def test_reach(bound: str, reached: str | None) -> None:
    assert reach(bound) == reached


# ------------------------------------------------------------ flags, lines, the command


def test_flags_are_shell_quoted_and_the_embedded_engine_keeps_its_own() -> None:
    engine = FoundEngine("llmtop-embedded", "http://127.0.0.1:11435", "0.27.0",
                         loaded=(), available=("gemma3:270m",))
    assert engine.flags() == ("--engine embedded --host http://127.0.0.1:11435 "
                              "--model gemma3:270m")
    odd = FoundEngine("openai-compatible", "http://[::1]:1337", available=("my model",))
    assert odd.flags() == "--engine openai --host 'http://[::1]:1337/v1' --model 'my model'"
    assert FoundEngine("vllm", "http://127.0.0.1:8000").flags() == (
        "--engine openai --host http://127.0.0.1:8000/v1")  # no model listed: no --model


def test_others_line_leaves_out_the_engine_in_use() -> None:
    used = FoundEngine("ollama", "http://127.0.0.1:11434", "0.12.3", (), ("qwen3:4b",))
    other = FoundEngine("llama-server", "http://127.0.0.1:8080", "b6500", ("gemma",), None)
    result = Discovery(engines=(used, other))
    assert discovery.others_line(result, "http://127.0.0.1:11434") == (
        "other engine answers here: llama-server b6500 at http://127.0.0.1:8080 (--engine "
        "openai --host http://127.0.0.1:8080/v1 --model gemma) — `llmtop engines` lists them")
    assert discovery.others_line(Discovery(engines=(other,)), "http://127.0.0.1:8080/v1") is None


def _command(monkeypatch: pytest.MonkeyPatch, ports: list[int], json_out: bool) -> int:
    """`llmtop engines` in this process, probing only `ports` (no usual port, no scan)."""
    monkeypatch.setattr(discovery, "KNOWN_PORTS", {})
    monkeypatch.setattr("llmtop.connect.socket_hints", lambda: ([], None))
    return engines_command.main(argparse.Namespace(ports=ports, json=json_out))


def test_command_json_and_exit_zero(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    with ScriptedOpenAI("vllm") as up:
        code = _command(monkeypatch, [up.port], True)
    out = json.loads(capsys.readouterr().out)
    assert code == ExitCode.OK == out["exit_code"]
    [engine] = out["engines"]
    assert engine["kind"] == "vllm" and engine["version"] == "0.0.0-scripted"
    assert engine["loaded"] == list(MODELS) and engine["available"] is None
    assert engine["flags"] == (f"--engine openai --host http://127.0.0.1:{up.port}/v1 "
                               f"--model {MODELS[0]}")


def test_command_table(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    with ScriptedUpstream() as up:
        code = _command(monkeypatch, [up.port], False)
    lines = capsys.readouterr().out.splitlines()
    assert code == ExitCode.OK
    assert lines[0].split() == ["KIND", "VERSION", "ADDRESS", "MODELS", "PROCESS"]
    assert lines[1].split()[:3] == ["ollama", VERSION, f"http://127.0.0.1:{up.port}"]
    assert lines[2] == f"  flags: --engine ollama --host http://127.0.0.1:{up.port} --model ok"
    assert lines[-1].startswith(f"(ports {up.port} probed on 127.0.0.1, then ::1, in ")


def test_command_finds_nothing_exit_3(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    port = free_port()
    code = _command(monkeypatch, [port], False)
    captured = capsys.readouterr()
    assert code == ExitCode.ENGINE_UNREACHABLE == 3
    assert captured.out == ""
    assert captured.err == (
        f"llmtop engines: no LLM engine answers on this machine (ports {port} on loopback, "
        "and the listening sockets of known engine processes): start one, or name the port "
        "it listens on with --ports\n")



# ------------------------------------------------------------ `run`'s line on stderr


def _run_args(**given) -> argparse.Namespace:
    flags = {"engine": "auto", "host": None, "relay": None, "model_path": None, **given}
    return argparse.Namespace(**flags)


@pytest.mark.parametrize("given", [{"engine": "ollama"}, {"host": "127.0.0.1:8080"},
                                   {"relay": "http://127.0.0.1:8000"},
                                   {"model_path": "m.gguf"}])
def test_run_searches_only_without_engine_flags(given: dict, monkeypatch) -> None:
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    assert engines_command.others_task(_run_args(**given)) is None


def test_run_does_not_search_when_ollama_host_names_the_engine(monkeypatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "127.0.0.1:9999")
    assert engines_command.others_task(_run_args()) is None


def test_say_others_prints_one_line_without_the_engine_in_use(capsys) -> None:
    used = FoundEngine("ollama", "http://127.0.0.1:11434", "0.12.3", (), ("qwen3:4b",))
    other = FoundEngine("vllm", "http://127.0.0.1:8000", "0.6.3", ("Qwen/Qwen3-0.6B",))

    async def go() -> None:
        async def search() -> Discovery:
            return Discovery(engines=(used, other))
        await engines_command.say_others(asyncio.create_task(search()),
                                         "http://127.0.0.1:11434")

    asyncio.run(go())
    assert capsys.readouterr().err == (
        "# other engine answers here: vllm 0.6.3 at http://127.0.0.1:8000 (--engine openai "
        "--host http://127.0.0.1:8000/v1 --model Qwen/Qwen3-0.6B) — `llmtop engines` lists "
        "them\n")


def test_say_others_gives_up_a_search_not_done_and_holds_nothing(capsys) -> None:
    async def go() -> bool:
        never = asyncio.Event()

        async def search() -> Discovery:
            await never.wait()  # a port that hangs past the wait
            return Discovery()
        task = asyncio.create_task(search())
        await engines_command.say_others(task, None)
        await asyncio.sleep(0)  # let the cancellation land
        return task.cancelled()

    assert asyncio.run(go()) is True
    assert capsys.readouterr().err == ""
