"""Identifying the measured engine's processes without privileges (psutil faked where the OS
would hide things: `pid=None` on Linux, AccessDenied on macOS), and once for real."""

from __future__ import annotations

import os
import socket
from collections import namedtuple
from pathlib import Path
from typing import Any

import psutil
import pytest

from llmtop.probes.engine_identity import (
    BY_NAME,
    GIVEN,
    SOCKET_OWNER,
    SOCKET_USER,
    Candidate,
    Sources,
    identify_engine,
    listening_uids,
    parse_proc_net,
)
from llmtop.probes.engine_state import local_engine_pids
from llmtop.probes.verdict import REMEDY_UNIDENTIFIED, Level

HOST = "http://127.0.0.1:11434"
Addr = namedtuple("Addr", "ip port")
Conn = namedtuple("Conn", "fd family type laddr raddr status pid")

# /proc/net/tcp as Linux writes it. 0x2CAA = 11434. Row 0: 127.0.0.1:11434 LISTEN (st 0A)
# owned by uid 999; row 1: an ESTABLISHED (01) connection to that port by uid 1000 (not a
# listener); row 2: 0.0.0.0:8080 LISTEN by uid 1000.
TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:2CAA 00000000:0000 0A 00000000:00000000 00:00000000 00000000   999        0 4242 1
   1: 0100007F:D431 0100007F:2CAA 01 00000000:00000000 00:00000000 00000000  1000        0 4343 1
   2: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4444 1
"""
# /proc/net/tcp6: [::]:11434 LISTEN by uid 0; a truncated line is skipped.
TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:2CAA 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 99 1
   1: garbage
"""


@pytest.mark.parametrize(
    ("text", "port", "uids"),
    [
        (TCP, 11434, {999}),  # the ESTABLISHED row's uid 1000 is not a listener
        (TCP, 8080, {1000}),
        (TCP, 1, set()),
        (TCP6, 11434, {0}),
        ("", 11434, set()),
    ],
)
def test_parse_proc_net(text: str, port: int, uids: set[int]) -> None:
    assert parse_proc_net(text, port) == uids


def test_listening_uids_reads_both_files_and_none_off_linux(tmp_path: Path) -> None:
    (tmp_path / "tcp").write_text(TCP)
    (tmp_path / "tcp6").write_text(TCP6)
    files = (str(tmp_path / "tcp"), str(tmp_path / "tcp6"))
    assert listening_uids(11434, files) == {999, 0}
    assert listening_uids(11434, (str(tmp_path / "missing"),)) is None


def conn(pid: int | None, port: int = 11434, status: str = psutil.CONN_LISTEN) -> Conn:
    return Conn(3, socket.AF_INET, socket.SOCK_STREAM, Addr("127.0.0.1", port), (), status, pid)


def raises(exc: Exception) -> Any:
    def read() -> Any:
        raise exc

    return read


def sources(
    tmp_path: Path,
    connections: Any,
    candidates: list[Candidate],
    proc_net: str | None = TCP,
    tree: dict[int, list[int]] | None = None,
) -> Sources:
    files: tuple[str, ...] = ()
    if proc_net is not None:
        (tmp_path / "tcp").write_text(proc_net)
        files = (str(tmp_path / "tcp"),)
    kids = tree if tree is not None else {900: [901]}
    return Sources(
        connections=connections,
        proc_net=files,
        candidates=lambda: candidates,
        children=lambda pid: kids.get(pid, []),
        exists=lambda pid: pid in (900, 901, 950),
    )


OLLAMA = [Candidate(900, "Ollama", 999), Candidate(901, "Ollama", 999)]
LLAMA_CPP = [Candidate(950, "llama.cpp", 1000)]


def test_socket_owner_visible(tmp_path: Path) -> None:
    src = sources(tmp_path, lambda: [conn(900), conn(None, 22)], OLLAMA)
    found = identify_engine(HOST, sources=src)
    assert (found.pids, found.how, found.app, found.notes) == (
        frozenset({900, 901}), SOCKET_OWNER, "Ollama", ()
    )
    assert found.describe() == (
        "engine: Ollama pids 900, 901 — identified by the owner of the listening socket"
    )
    assert found.finding().level is Level.INFO and found.finding().code == "engine-identified"


def test_socket_owned_by_a_forwarder_adds_the_one_engine_by_name(tmp_path: Path) -> None:
    # docker-proxy (pid 700, not an engine) owns the published port; Ollama runs in the
    # container (pids 900, 901 as the host sees them): both are the measured path.
    src = sources(tmp_path, lambda: [conn(700)], OLLAMA)
    found = identify_engine(HOST, sources=src)
    assert (found.pids, found.how) == (frozenset({700, 900, 901}), SOCKET_OWNER)
    assert found.app == "Ollama"
    assert found.notes == ("the socket's owner is not a known engine: Ollama added by name",)
    # With two engine families running, the owner alone is trusted (no guess).
    two = identify_engine(HOST, sources=sources(tmp_path, lambda: [conn(700)], OLLAMA + LLAMA_CPP))
    assert (two.pids, two.app, two.notes) == (frozenset({700}), None, ())


def test_linux_other_users_socket_pid_none_uses_socket_uid(tmp_path: Path) -> None:
    # Ollama as a service (uid 999); a llama.cpp of the desktop user (uid 1000) is also running,
    # so the catalogue alone could not decide: the socket's uid does.
    src = sources(tmp_path, lambda: [conn(None)], OLLAMA + LLAMA_CPP)
    found = identify_engine(HOST, sources=src)
    assert (found.pids, found.how, found.app) == (frozenset({900, 901}), SOCKET_USER, "Ollama")
    assert found.notes == ("socket owner not visible to this user",)
    assert found.describe() == (
        "engine: Ollama pids 900, 901 — identified by the listening socket's user and engine"
        " names; socket owner not visible to this user"
    )


def test_an_engine_declared_on_another_port_is_never_the_one_answering(tmp_path: Path) -> None:
    # Ollama as a service (uid 999) at 11434 and another llmtop's embedded engine of the same
    # user, started with `--port 41234` (CI ran both as root: the socket's user "runs several
    # engines"). The engine that declares another port cannot own 11434: Ollama alone is left.
    other = Candidate(960, "llmtop engine", 999, 41234)
    found = identify_engine(HOST, sources=sources(tmp_path, lambda: [conn(None)], OLLAMA + [other]))
    assert (found.pids, found.how, found.app) == (frozenset({900, 901}), SOCKET_USER, "Ollama")
    # the same engine declared on 11434 stays a candidate: then the user runs two engines there
    same = Candidate(960, "llmtop engine", 999, 11434)
    two = identify_engine(HOST, sources=sources(tmp_path, lambda: [conn(None)], OLLAMA + [same]))
    assert not two.identified
    from llmtop.probes.engine_identity import declared_port

    assert declared_port(["python3", "-m", "llmtop", "engine", "--port", "41234"]) == 41234
    assert declared_port(["llama-server", "--port=8080", "-m", "x.gguf"]) == 8080
    assert declared_port(["ollama", "serve"]) is None and declared_port(None) is None
    assert declared_port(["llama-server", "--port"]) is None  # a flag without its value


def test_macos_access_denied_falls_back_to_name(tmp_path: Path) -> None:
    src = sources(tmp_path, raises(psutil.AccessDenied()), OLLAMA, proc_net=None)
    found = identify_engine(HOST, sources=src)
    assert (found.pids, found.how) == (frozenset({900, 901}), BY_NAME)
    assert found.describe() == (
        "engine: Ollama pids 900, 901 — identified by name;"
        " sockets not listable by this user (AccessDenied)"
    )


def test_two_engine_families_and_no_socket_user_match_is_not_identified(tmp_path: Path) -> None:
    # The socket's uid 999 runs no known engine here (e.g. a renamed binary).
    src = sources(tmp_path, raises(psutil.AccessDenied()), [Candidate(900, "Ollama", 5)] + LLAMA_CPP)
    found = identify_engine(HOST, sources=src)
    assert not found.identified and found.pids == frozenset()
    assert found.notes[0] == "sockets not listable by this user (AccessDenied)"
    assert found.notes[1].startswith("the socket's user (") and "runs no known engine" in found.notes[1]
    assert found.notes[2] == "several engines are running (Ollama, llama.cpp): cannot tell which"
    finding = found.finding()
    assert (finding.code, finding.level) == ("engine-unidentified", Level.INFO)
    assert finding.message.endswith("its CPU may be counted as background load")
    assert finding.remedy == REMEDY_UNIDENTIFIED and "stop" not in finding.remedy


def test_nothing_running(tmp_path: Path) -> None:
    found = identify_engine(HOST, sources=sources(tmp_path, list, [], proc_net=""))
    assert found.describe() == (
        "engine: not identified; no socket listens on port 11434 in /proc/net/tcp (another"
        " namespace?); no known engine process is running"
    )


def test_override_pids_with_children_and_dead_ones(tmp_path: Path) -> None:
    src = sources(tmp_path, raises(AssertionError("sockets must not be read")), [])
    found = identify_engine("http://gpu-box:11434", [900, 12345], sources=src)
    assert (found.pids, found.how, found.notes) == (
        frozenset({900, 901}), GIVEN, ("pid 12345 is not running",)
    )
    assert found.describe().startswith("engine: pids 900, 901 — identified by the pids given")


@pytest.mark.parametrize(
    ("host", "local", "note"),
    [
        ("http://127.0.0.1:11434", True, None),
        ("localhost:11434", True, None),
        ("http://[::1]:11434", True, None),
        ("http://0.0.0.0:11434", True, None),
        ("http://203.0.113.7:11434", False, None),  # TEST-NET-3: never a local address
        ("http://gpu-box:11434", False, "cannot tell whether gpu-box is this machine (not resolved)"),
    ],
)
def test_local_or_remote_host(tmp_path: Path, host: str, local: bool, note: str | None) -> None:
    found = identify_engine(host, sources=sources(tmp_path, lambda: [conn(900)], OLLAMA))
    assert found.local is local
    if not local:
        assert found.pids == frozenset() and found.finding().code == "engine-identified"
        assert found.describe() == f"engine: not on this machine ({host})"
        assert found.notes == ((note,) if note else ())


def test_real_socket_owner_is_this_process() -> None:
    # A real listener in this process: root or not, psutil shows our own socket's owner.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        found = identify_engine(f"http://127.0.0.1:{port}")
        assert os.getpid() in found.pids and found.how == SOCKET_OWNER
        assert local_engine_pids(f"http://127.0.0.1:{port}") >= {os.getpid()}
    assert local_engine_pids("http://203.0.113.7:1", override=[os.getpid()]) >= {os.getpid()}


def test_llama_cpp_python_is_an_engine_by_its_arguments() -> None:
    from llmtop.probes.catalogue import Category, classify

    rule = classify("python3", None, ["python3", "-m", "llama_cpp.server", "--model", "m.gguf"])
    assert rule is not None and (rule.app, rule.category) == ("llama-cpp-python", Category.INFERENCE)


def test_another_llmtops_embedded_engine_is_an_inference_engine() -> None:
    # the command line servers/child.py gives the embedded engine (newcomer row 8: it showed
    # as plain "python")
    from llmtop.probes.catalogue import Category, classify

    rule = classify("python3.11", None, ["/venv/bin/python3.11", "-m", "llmtop", "engine",
                                         "--host", "127.0.0.1", "--port", "41234"])
    assert rule is not None and (rule.app, rule.category) == ("llmtop engine", Category.INFERENCE)
    # llmtop's TUI itself is not one
    tui = classify("python3", None, ["python3", "-m", "llmtop", "--engine", "embedded"])
    assert tui is None or tui.category is not Category.INFERENCE


def test_engine_candidates_finds_a_real_process_by_name(tmp_path: Path) -> None:
    # A real process named llama-server (the name a process is executed under), sleeping.
    import subprocess
    import sys

    from llmtop.probes.engine_identity import engine_candidates

    link = tmp_path / "llama-server"
    link.symlink_to(os.path.realpath(sys.executable))
    child = subprocess.Popen([str(link), "-c", "import time; time.sleep(30)"])
    try:
        found = [c for c in engine_candidates() if c.pid == child.pid]
        assert found == [Candidate(child.pid, "llama.cpp", os.geteuid())]
        assert all(c.pid != 0 for c in engine_candidates())
    finally:
        child.kill()
        child.wait(timeout=10)


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc/net/tcp")
def test_psutil_hiding_the_owner_real_proc_net(monkeypatch: pytest.MonkeyPatch) -> None:
    # A real listener; psutil patched to hide its owner as Linux does for another user's
    # socket (pid=None). The socket's real uid comes from the real /proc/net/tcp.
    from llmtop.probes import engine_identity

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        hidden = [conn(None, port)]
        monkeypatch.setattr(psutil, "net_connections", lambda kind="inet": hidden)
        me = Candidate(os.getpid(), "Ollama", os.geteuid())
        other_user = Candidate(4_000_000, "llama.cpp", os.geteuid() + 1)
        monkeypatch.setattr(engine_identity, "engine_candidates", lambda: [me, other_user])
        found = identify_engine(f"http://127.0.0.1:{port}")
        assert (found.how, found.app, found.notes) == (
            SOCKET_USER, "Ollama", ("socket owner not visible to this user",)
        )
        assert os.getpid() in found.pids and 4_000_000 not in found.pids

        def denied(kind: str = "inet") -> Any:
            raise psutil.AccessDenied()  # macOS without root

        monkeypatch.setattr(psutil, "net_connections", denied)
        assert identify_engine(f"http://127.0.0.1:{port}").how == SOCKET_USER
