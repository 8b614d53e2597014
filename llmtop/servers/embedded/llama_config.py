"""Which llama.cpp CPU configuration the embedded engine loads with: the fastest safe one.

Why: llama.cpp repacks a model's weights at load into "extra buffer types" (AMX tiles on
Intel CPUs that have AMX, interleaved AVX2/AVX-512 layouts elsewhere). On some machines that
path dies by a signal at the first matrix product — SIGILL on `tilezero` in
`ggml_backend_amx_mul_mat` on Xeons where the kernel keeps AMX tile state off per thread
(llama.cpp PR #26954; reports #28756, #28328). A crash by signal cannot be caught inside the
process, so each configuration is tried in a throwaway child process (`python -m
llmtop.servers.embedded.llama_config --trial NAME`): it loads the model, evaluates a 64-token prompt
and 24 single-token decodes three times, and prints the best round's rates (noise from
other programs only slows a round down). A child killed by a signal marks that configuration
unsafe on this machine.

The choice (`choose`): of the configurations that survived, the one with the highest decode
rate; one within DECODE_TIE (10 %) of it counts as equally fast and the higher prefill rate
decides, then the order of CONFIGS (llama.cpp's default first). It is cached per machine
and build (CPU model and flags, llama-cpp-python's version and shared library, the model
file) under the user cache folder, so the trials run once, on the first start. The user can
force one with `LLMTOP_LLAMA_REPACK=on|off` (`auto`, the default, runs the trials).

Applying a configuration (`apply`) changes llama.cpp's model defaults for this process:
`llama_model_params.use_extra_bufts`, the field llama-server's `--no-repack` clears.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import platformdirs

from llmtop.files import write_atomically

ENV_FORCE = "LLMTOP_LLAMA_REPACK"  # on | off | auto
TRIAL_TIMEOUT_S = 90.0  # loading + 64 + 24 tokens takes ~2 s on 2 cores; room for a slow disk
# Rates within 10 % count as equal: on a 2-core machine another program moved one trial's
# best-of-3 decode rate by more than 5 % between back-to-back runs (docs/method.md).
DECODE_TIE = 0.10
TRIAL_PROMPT_TOKENS = 64
TRIAL_DECODE_TOKENS = 24
TRIAL_ROUNDS = 3  # each trial reports its best round (prompt + decodes)
TRIAL_ROUNDS_BUDGET_NS = 4_000_000_000  # no further round after 4 s of rounds (~1 s each, quiet)
CACHE_NAME = "llama-cpu-config.json"
CACHE_ENTRIES = 8  # builds × models remembered per machine
LOG_TAIL_LINES = 5


@dataclass(frozen=True, slots=True)
class LlamaConfig:
    """One way of loading a model. name: "repack" or "no-repack"; use_extra_bufts: the
    llama.cpp model parameter; summary: what it means, for messages."""

    name: str
    use_extra_bufts: bool
    summary: str


REPACK = LlamaConfig("repack", True, "llama.cpp's default: weights repacked for this CPU "
                                     "(AMX tiles where the CPU has them, AVX2/AVX-512 layouts)")
NO_REPACK = LlamaConfig("no-repack", False, "extra buffer types off: no weight repacking, "
                                            "no AMX (llama-server's --no-repack)")
CONFIGS = (REPACK, NO_REPACK)
BY_NAME = {c.name: c for c in CONFIGS}
FORCED = {"on": REPACK, "off": NO_REPACK}


def signal_text(signum: int) -> str:
    """"SIGILL (illegal instruction)" for 4: the signal's name and the OS's description."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    try:
        description = (signal.strsignal(signum) or "").lower()
    except ValueError:  # out of the OS's range
        description = ""
    return f"{name} ({description})" if description else name


@dataclass(frozen=True, slots=True)
class Trial:
    """One configuration tried in a throwaway process.

    ok: it loaded, generated and exited 0. prefill_tps / decode_tps: tokens per second of the
    64-token prompt evaluation and of the single-token decodes (None when it did not finish).
    signal: the signal number that killed it (None if none); exit_code: its exit status;
    detail: the last lines of its output when it failed; wall_ms: the trial's duration;
    timed_out: it gave no answer within its time (a busy machine, not a verdict on the CPU);
    others_busy: the share of the machine's CPU (0–1) other programs used during the trial
    (all CPU time less the trial's own), None where it cannot be read.
    """

    config: str
    ok: bool
    prefill_tps: float | None = None
    decode_tps: float | None = None
    signal: int | None = None
    exit_code: int | None = None
    detail: str = ""
    wall_ms: float = 0.0
    timed_out: bool = False
    others_busy: float | None = None

    def describe(self) -> str:
        """One line: "repack: 61.2 tok/s decode, 540 tok/s prefill" or why it failed."""
        if self.ok:
            return (f"{self.config}: {self.decode_tps:.1f} tok/s decode, "
                    f"{self.prefill_tps:.0f} tok/s prefill")
        if self.signal is not None:
            return f"{self.config}: killed by {signal_text(self.signal)}"
        detail = f": {self.detail}" if self.detail else ""
        return f"{self.config}: failed (exit {self.exit_code}){detail}"


@dataclass(frozen=True, slots=True)
class Choice:
    """The configuration the engine loads with, and why.

    config: the LlamaConfig; reason: one line for headers and logs ("llama.cpp repack off:
    the repack path was killed by SIGILL (illegal instruction) on this CPU"); source:
    "self-test", "cached self-test" or "forced by LLMTOP_LLAMA_REPACK=off"; trials: what
    was tried (empty when forced); tested_at: the trials' UTC time label.
    """

    config: LlamaConfig
    reason: str
    source: str
    trials: tuple[Trial, ...] = ()
    tested_at: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: config name, use_extra_bufts, reason, source, tested_at, trials."""
        return {"config": self.config.name, "use_extra_bufts": self.config.use_extra_bufts,
                "reason": self.reason, "source": self.source, "tested_at": self.tested_at,
                "trials": [asdict(t) for t in self.trials]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Choice:
        """The inverse of to_dict. Raises KeyError/TypeError/ValueError on a malformed dict."""
        return cls(BY_NAME[data["config"]], str(data["reason"]), str(data["source"]),
                   tuple(Trial(**t) for t in data.get("trials", ())),
                   str(data.get("tested_at", "")))


# ---------------------------------------------------------------------- applying


def apply(config: LlamaConfig) -> None:
    """Make every llama.cpp model this process loads from now on use `config`: wraps
    llama-cpp-python's `llama_model_default_params` (which `Llama` and its internals call
    for each load) so that `use_extra_bufts` is set as the config says. Idempotent.
    Raises ImportError when llama-cpp-python is not installed."""
    import llama_cpp.llama_cpp as lib

    original = getattr(lib.llama_model_default_params, "_llmtop_original",
                       lib.llama_model_default_params)

    def defaults() -> Any:
        params = original()
        params.use_extra_bufts = config.use_extra_bufts
        return params

    defaults._llmtop_original = original  # type: ignore[attr-defined]
    defaults._llmtop_config = config  # type: ignore[attr-defined]
    lib.llama_model_default_params = defaults


def applied() -> LlamaConfig | None:
    """The configuration `apply` set in this process, or None (llama.cpp's own defaults)."""
    try:
        import llama_cpp.llama_cpp as lib
    except ImportError:
        return None
    config: LlamaConfig | None = getattr(lib.llama_model_default_params, "_llmtop_config", None)
    return config


# ---------------------------------------------------------------------- the trials


def trial_command(config: LlamaConfig, model_path: str, threads: int) -> list[str]:
    """The throwaway process that tries `config`: this Python, this module, `--trial`."""
    return [sys.executable, "-m", "llmtop.servers.embedded.llama_config", "--trial", config.name,
            "--model", model_path, "--threads", str(threads)]


def run_trial(config: LlamaConfig, command: Sequence[str],
              timeout_s: float = TRIAL_TIMEOUT_S) -> Trial:
    """Run one trial process and read what became of it: its last stdout line is the JSON
    `{"prefill_tps": …, "decode_tps": …}`; a negative return code is the signal that killed
    it; a timeout counts as a failure (the process is killed). Never raises for the child's
    failure (OSError if it cannot be started at all)."""
    t0 = perf_counter_ns()
    before = _cpu_now()
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, errors="replace",
                              timeout=timeout_s, stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr if isinstance(exc.stderr, str) else (exc.stderr or b"").decode(
            errors="replace")
        detail = f"no answer within {timeout_s:.0f} s {_tail(err)}".strip()
        return Trial(config.name, False, detail=detail, wall_ms=(perf_counter_ns() - t0) / 1e6,
                     timed_out=True)
    wall_ms = (perf_counter_ns() - t0) / 1e6
    others = _others_busy(before, _cpu_now(), wall_ms / 1e3)
    rc = done.returncode
    if rc < 0:
        return Trial(config.name, False, signal=-rc, exit_code=rc, detail=_tail(done.stderr),
                     wall_ms=wall_ms)
    if rc != 0:
        return Trial(config.name, False, exit_code=rc, detail=_tail(done.stderr), wall_ms=wall_ms)
    try:
        rates = json.loads(done.stdout.strip().splitlines()[-1])
        prefill, decode = float(rates["prefill_tps"]), float(rates["decode_tps"])
    except (IndexError, KeyError, TypeError, ValueError):
        return Trial(config.name, False, exit_code=rc,
                     detail=f"no rates in its output: {_tail(done.stdout)}", wall_ms=wall_ms)
    return Trial(config.name, True, prefill_tps=prefill, decode_tps=decode, exit_code=0,
                 wall_ms=wall_ms, others_busy=others)


def _cpu_now() -> tuple[float, float] | None:
    """(the machine's busy CPU seconds, the waited-for children's CPU seconds), None where
    either cannot be read (no `resource` module: Windows)."""
    try:
        import resource

        import psutil

        t = psutil.cpu_times()
        busy = t.user + t.system + sum(getattr(t, f, 0.0) for f in ("nice", "irq", "softirq",
                                                                     "steal"))
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return busy, kids.ru_utime + kids.ru_stime
    except (ImportError, OSError, AttributeError):
        return None


def _others_busy(before: tuple[float, float] | None, after: tuple[float, float] | None,
                 wall_s: float) -> float | None:
    """Other programs' share (0–1) of the machine's CPU over `wall_s`: all busy CPU time less
    the trial's own (a child's time counts once it has been waited for)."""
    if before is None or after is None or wall_s <= 0:
        return None
    cpus = os.cpu_count() or 1
    others = (after[0] - before[0]) - (after[1] - before[1])
    return min(max(others / (wall_s * cpus), 0.0), 1.0)


def _tail(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-LOG_TAIL_LINES:])


def fastest(trials: Sequence[Trial]) -> Trial | None:
    """The trial to keep: the highest decode rate among those that ran; trials within
    DECODE_TIE of it are equally fast, and among them the highest prefill rate wins, then
    the earlier in `trials`. None when none ran."""
    ran = [t for t in trials if t.ok and t.decode_tps is not None and t.prefill_tps is not None]
    if not ran:
        return None
    best_decode = max(t.decode_tps or 0.0 for t in ran)
    tied = [t for t in ran if (t.decode_tps or 0.0) >= best_decode * (1 - DECODE_TIE)]
    best_prefill = max(t.prefill_tps or 0.0 for t in tied)
    return next(t for t in tied if (t.prefill_tps or 0.0) >= best_prefill * (1 - DECODE_TIE))


def _reason(kept: LlamaConfig, trials: Sequence[Trial]) -> str:
    state = "on" if kept.use_extra_bufts else "off"
    waited = [t for t in trials if t.timed_out]
    if waited:
        ran = "; ".join(t.describe() for t in trials if t.ok)
        why = "; ".join(_failure_words(t) for t in waited)
        return (f"llama.cpp repack {state}: the one trial that finished ({ran}); {why}, so "
                "it is tested again at the next start")
    crashed = [t for t in trials if not t.ok]
    if crashed:
        why = "; ".join(_failure_words(t) for t in crashed)
        return f"llama.cpp repack {state}: {why} on this CPU"
    rates = "; ".join(t.describe() for t in trials)
    others = [t for t in trials if t.config != kept.name]
    kept_rate = next((t.decode_tps or 0.0) for t in trials if t.config == kept.name)
    if all(kept_rate * (1 - DECODE_TIE) > (t.decode_tps or 0.0) for t in others):
        return f"llama.cpp repack {state}: the fastest configuration tried ({rates})"
    return (f"llama.cpp repack {state}: the configurations tried were as fast within "
            f"{DECODE_TIE:.0%} ({rates}), so the first of them in llmtop's order is kept")


def _failure_words(t: Trial) -> str:
    if t.timed_out:
        return f"the {t.config} trial gave no answer in time (a busy machine)"
    if t.signal is not None:
        path = "the AMX/repack path" if t.config == REPACK.name else f"the {t.config} path"
        return f"{path} was killed by {signal_text(t.signal)}"
    return f"the {t.config} path failed ({t.detail or f'exit {t.exit_code}'})"


class NoSafeConfig(RuntimeError):
    """Every configuration died or failed on this machine; the message lists each trial."""


Runner = Callable[[LlamaConfig], Trial]


INCONCLUSIVE = "self-test, inconclusive"  # a Choice.source that is not cached
# Above this share of the CPU taken by other programs, trial rates are not compared: the
# probes' own "background CPU" warning level (probes/verdict.py, Thresholds: 25 %).
NOISY_OTHERS = 0.25


def self_test(runner: Runner, configs: Sequence[LlamaConfig] = CONFIGS) -> Choice:
    """Try each of `configs` with `runner` (a trial each) and keep the fastest safe one.

    Only a trial killed by a signal marks a configuration unsafe. One that timed out (a busy
    machine) proves nothing: when no trial ran, the first configuration that did not die is
    kept, and the choice is INCONCLUSIVE (not cached: the next start tests again), as it is
    when a faster configuration may have been among those that timed out. Raises
    NoSafeConfig when every configuration died or failed."""
    trials = tuple(runner(c) for c in configs)
    best = fastest(trials)
    waited = [t for t in trials if t.timed_out]
    if best is None:
        if not waited:
            raise NoSafeConfig("llama.cpp failed in every configuration llmtop tried on this "
                               "machine: " + "; ".join(t.describe() for t in trials))
        kept = BY_NAME[waited[0].config]
        state = "on" if kept.use_extra_bufts else "off"
        why = "; ".join(t.describe() for t in trials)
        return Choice(kept, f"llama.cpp repack {state}: the self-test could not finish on this "
                            f"busy machine ({why}); tested again at the next start",
                      INCONCLUSIVE, trials, _now_label())
    ran = [t for t in trials if t.ok]
    busiest = max((t.others_busy or 0.0) for t in ran)
    if len(ran) > 1 and busiest > NOISY_OTHERS:
        # rates measured beside a busy program say nothing about which is faster: keep the
        # first that ran, in llmtop's order (llama.cpp's default first), and test again later
        kept = BY_NAME[ran[0].config]
        state = "on" if kept.use_extra_bufts else "off"
        rates = "; ".join(t.describe() for t in trials)
        return Choice(kept, f"llama.cpp repack {state}: other programs used {busiest:.0%} of "
                            f"the CPU during the self-test ({rates}), too busy to compare "
                            "rates, so the first configuration that ran is kept and tested "
                            "again at the next start", INCONCLUSIVE, trials, _now_label())
    kept = BY_NAME[best.config]
    source = INCONCLUSIVE if waited else "self-test"
    return Choice(kept, _reason(kept, trials), source, trials, _now_label())


def _now_label() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------- the cache


def machine_key(model_path: str) -> dict[str, Any]:
    """What the choice depends on: the CPU (model name and flags, hashed), the OS kernel,
    llama-cpp-python's version and its shared library (path, size, mtime: a rebuild changes
    them), and the model file (path, size). A cached choice is reused only for an equal key."""
    cpu = _cpu_identity()
    key: dict[str, Any] = {"cpu": hashlib.sha256(cpu.encode()).hexdigest()[:16],
                           "kernel": platform.release(), "machine": platform.machine()}
    with contextlib.suppress(ImportError, OSError):
        import llama_cpp

        key["llama_cpp_python"] = llama_cpp.__version__
        lib_dir = Path(llama_cpp.__file__).parent / "lib"
        libs = sorted(lib_dir.glob("*llama*")) or sorted(lib_dir.glob("*"))
        key["libs"] = [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in libs]
    with contextlib.suppress(OSError):
        key["model"] = [os.path.abspath(model_path), os.path.getsize(model_path)]
    return key


def _cpu_identity() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            wanted = [line for line in fh if line.startswith(("model name", "flags", "Features",
                                                              "CPU part"))]
        return "".join(sorted(set(wanted))) or platform.processor()
    except OSError:
        return f"{platform.processor()} {platform.machine()}"


def cache_path() -> Path:
    """Where the choice is cached: the user cache folder's llama-cpu-config.json."""
    return platformdirs.user_cache_path("llmtop") / CACHE_NAME


def _entries(path: Path) -> list[dict[str, Any]]:
    """The cache file's entries ({"key", "choice"} each, newest first); [] when unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        entries = data["entries"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("key"), dict)]


def cached(model_path: str, path: Path | None = None) -> Choice | None:
    """The cached choice for this machine, build and model, or None (none for this key, or an
    unreadable file). The file keeps one entry per key (CACHE_ENTRIES at most), so two
    installs on one machine — a venv and a fresh clone's — do not test again in turn."""
    key = machine_key(model_path)
    for entry in _entries(path or cache_path()):
        if entry["key"] == key:
            try:
                choice = Choice.from_dict(entry["choice"])
            except (KeyError, TypeError, ValueError, AttributeError):
                return None
            return Choice(choice.config, choice.reason, "cached self-test", choice.trials,
                          choice.tested_at)
    return None


def remember(choice: Choice, model_path: str, path: Path | None = None) -> None:
    """Add the choice to the cache (replacing its key's entry, newest first, CACHE_ENTRIES at
    most), written atomically (a temporary file renamed over it). A cache that cannot be
    written is skipped silently: the trials then run again next time."""
    path = path or cache_path()
    key = machine_key(model_path)
    entries = [{"key": key, "choice": choice.to_dict()}]
    entries += [e for e in _entries(path) if e["key"] != key][: CACHE_ENTRIES - 1]
    write_atomically(path, json.dumps({"entries": entries}, indent=1))


def choose(model_path: str, threads: int, *, forced: str | None = None,
           runner: Runner | None = None, cache: Path | None = None) -> Choice:
    """The configuration to load `model_path` with on this machine.

    forced: "on", "off" or "auto" (default: $LLMTOP_LLAMA_REPACK, else "auto"); "on"/"off"
    skip the trials. Else the cached choice for this machine and build, else `self_test`
    with `runner` (default: a real trial process per config, `threads` threads), cached.
    Raises ValueError for another forced value, NoSafeConfig when no configuration ran.
    """
    forced = (forced or os.environ.get(ENV_FORCE) or "auto").strip().lower()
    if forced in FORCED:
        config = FORCED[forced]
        state = "on" if config.use_extra_bufts else "off"
        return Choice(config, f"llama.cpp repack {state}: forced by {ENV_FORCE}={forced}",
                      f"forced by {ENV_FORCE}={forced}", (), _now_label())
    if forced != "auto":
        raise ValueError(f"{ENV_FORCE}={forced!r} is not one of on, off, auto")
    found = cached(model_path, cache)
    if found is not None:
        return found
    run = runner or (lambda c: run_trial(c, trial_command(c, model_path, threads)))
    choice = self_test(run)
    if choice.source != INCONCLUSIVE:
        remember(choice, model_path, cache)
    return choice


def report_line(path: Path | None = None) -> str:
    """For `llmtop --version -v`: the configuration the embedded engine chose on this machine
    with this build (the newest cached self-test, whichever model it was tested with), or why
    there is none."""
    forced = os.environ.get(ENV_FORCE, "").strip().lower()
    if forced in FORCED:
        return f"forced by {ENV_FORCE}={forced}"

    def build(key: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in key.items() if k != "model"}

    for entry in _entries(path or cache_path()):
        now = machine_key(str((entry["key"].get("model") or [""])[0]))
        if build(entry["key"]) == build(now):
            try:
                choice = Choice.from_dict(entry["choice"])
            except (KeyError, TypeError, ValueError, AttributeError):
                break
            return f"{choice.reason} [self-test {choice.tested_at}]"
    return "not tested with this build on this CPU yet (the embedded engine tests it at its start)"


# ---------------------------------------------------------------------- the trial child


def _trial_main(config_name: str, model_path: str, threads: int) -> int:
    """In the throwaway process: load with the config, time a 64-token prompt and 24
    single-token decodes, print the rates as one JSON line. Dies by the signal if llama.cpp
    does; core dumps are turned off first so a crash leaves no core file."""
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    apply(BY_NAME[config_name])
    import llama_cpp

    n_ctx = TRIAL_PROMPT_TOKENS + TRIAL_DECODE_TOKENS + 8
    llm: Any = llama_cpp.Llama(model_path=model_path, n_ctx=n_ctx, n_batch=n_ctx,
                               n_threads=threads, n_threads_batch=threads, verbose=False)
    vocab = max(int(llm.n_vocab()), 2)
    # Token ids spread over the vocabulary (which ids does not change the cost of a decode).
    prompt = [llm.token_bos()] + [(7919 * i) % vocab for i in range(1, TRIAL_PROMPT_TOKENS)]
    llm.eval(prompt[:8])  # llama.cpp's lazy first-decode setup, outside the timing
    prefill_ns: list[int] = []
    decode_ns: list[int] = []
    t_rounds = perf_counter_ns()
    for _ in range(TRIAL_ROUNDS):  # the best round: other programs only ever slow one down
        if prefill_ns and perf_counter_ns() - t_rounds > TRIAL_ROUNDS_BUDGET_NS:
            break  # a busy machine: one round tells as much as three, sooner
        llm.reset()
        t0 = perf_counter_ns()
        llm.eval(prompt)
        t1 = perf_counter_ns()
        for i in range(TRIAL_DECODE_TOKENS):
            llm.eval([prompt[1 + i % (TRIAL_PROMPT_TOKENS - 1)]])
        decode_ns.append(perf_counter_ns() - t1)
        prefill_ns.append(t1 - t0)
    print(json.dumps({"prefill_tps": TRIAL_PROMPT_TOKENS / (min(prefill_ns) / 1e9),
                      "decode_tps": TRIAL_DECODE_TOKENS / (min(decode_ns) / 1e9)}), flush=True)
    llm.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m llmtop.servers.embedded.llama_config --trial NAME --model PATH --threads N`."""
    parser = argparse.ArgumentParser(prog="llmtop.servers.embedded.llama_config")
    parser.add_argument("--trial", required=True, choices=sorted(BY_NAME))
    parser.add_argument("--model", required=True)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    return _trial_main(args.trial, args.model, max(args.threads, 1))


if __name__ == "__main__":
    raise SystemExit(main())
