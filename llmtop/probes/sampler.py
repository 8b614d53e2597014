"""Periodic sampling of system + processes + GPU + verdict in a daemon thread.

The TUI runs this off its event loop and posts each `ProbeSample` as a message; preflight and
the session log call `sample_once()`. Each sample records what taking it cost (`cost_ms`,
CPU time of the sampling thread), so the observer effect is itself measured.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, is_dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from llmtop.probes.apple import gpu_probe as apple_gpu_probe
from llmtop.probes.energy import EnergyReader
from llmtop.probes.gpu import GpuProbe, GpuSample
from llmtop.probes.processes import PidSource, ProbeTimeout, ProcessProbe, ProcessSample
from llmtop.probes.system import SystemProbe, SystemSample
from llmtop.probes.verdict import DEFAULT, Finding, Level, Thresholds, Verdict, evaluate

log = logging.getLogger(__name__)

_thread_ns: Callable[[], int] = getattr(time, "thread_time_ns", time.process_time_ns)
STOP_WAIT_S = 0.5  # quitting must stay under 1 s even while a probe read hangs
# While nothing is measured (`ProbeSampler.set_measuring(False)`: the TUI open, no request or
# bench running) the GPU and the energy sources are read at most this often, seconds. Every
# NVML call or amdgpu/i915 attribute read can keep a GPU out of its deepest idle state: a
# monitor polling once a second doubled a laptop GPU's idle power (nvtop #230) and held a
# board at 60 W instead of 15 W (ComfyUI-Crystools #280). Between beats a sample carries the
# last beat's GPU reading (at most this old). During a request the GPU is read every sample.
IDLE_GPU_BEAT_S = 5.0


@dataclass(frozen=True, slots=True)
class ProbeSample:
    """One complete probe reading.

    t_ns: `time.perf_counter_ns()` when sampling began (durations only).
    wall_time: local ISO-8601 time with offset, a label only.
    system / processes / gpu: None only when that probe failed this time (a "probe-error"
        finding in `verdict` then says why).
    cost_ms: CPU time (ms) the sampling thread spent taking this sample (`thread_time_ns`).
    """

    t_ns: int
    wall_time: str
    system: SystemSample | None
    processes: ProcessSample | None
    gpu: GpuSample | None
    verdict: Verdict
    cost_ms: float

    def to_dict(self, max_apps: int | None = 20) -> dict[str, Any]:
        """JSON-ready dict (enums → strings, tuples → lists) for the session log.

        `max_apps` keeps the busiest apps only (None: all), and of those past the first
        MIN_LOGGED_APPS only the ones that used any CPU (an idle app past the top few is
        never a culprit); `processes.apps_omitted` counts the rest, so a 1 Hz log stays
        small. For the same reason floats keep FLOAT_DIGITS decimals (a CPU % to 0.001, a
        byte count is an int anyway) and an app lists at most MAX_PIDS of its pids (its
        `n_procs` still counts them all: the kernel's ~60 threads were a fifth of a record).
        """
        out: dict[str, Any] = _plain(self)
        procs = out.get("processes")
        if procs is not None:
            apps = procs["apps"]
            if max_apps is not None:
                apps = [a for i, a in enumerate(apps[:max_apps])
                        if i < MIN_LOGGED_APPS or (a.get("cpu_percent") or 0.0) > 0.0]
                procs["apps_omitted"] = len(procs["apps"]) - len(apps)
            procs["apps"] = [{**a, "pids": a["pids"][:MAX_PIDS]} for a in apps]
        return out


FLOAT_DIGITS = 3  # decimals a logged float keeps (see ProbeSample.to_dict)
MAX_PIDS = 8  # pids a logged app lists (its n_procs counts them all)
MIN_LOGGED_APPS = 5  # apps a logged sample keeps even when idle (see ProbeSample.to_dict)


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, FLOAT_DIGITS)
    if is_dataclass(value) and not isinstance(value, type):
        return {k: _plain(v) for k, v in asdict(value).items()}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _error(what: str, exc: BaseException) -> Finding:
    return Finding(
        "probe-error",
        Level.WARN,
        None,
        None,
        "",
        f"{what} probe failed: {type(exc).__name__}: {exc}",
        "the machine state is unknown for this sample; report this if it repeats",
    )


class SamplerState:
    """What every sampler thread shows its users (this module's `ProbeSampler`, and
    `remote.AgentSampler` over an agent's stream): its period, latest sample and liveness;
    and the thread's lifecycle, the same for both: `start` a daemon thread named
    THREAD_NAME running `_run` until `_stop` is set, `stop` it with a bounded join."""

    THREAD_NAME = "llmtop-sampler"
    _interval: float
    _latest: ProbeSample | None
    _thread: threading.Thread | None
    _stop: threading.Event

    def _run(self) -> None:
        raise NotImplementedError

    def _stopping(self) -> None:
        """Called by `stop` once `_stop` is set: wake a thread that waits on more than it."""

    def start(self) -> None:
        """Start the daemon thread; returns at once. No-op when already running."""
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.THREAD_NAME, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = STOP_WAIT_S) -> None:
        """Stop and join the thread, waiting at most `timeout_s` (default STOP_WAIT_S): a
        sample blocked in a probe read (or a stalled read of an agent) must not hold up
        quitting; the daemon thread then ends on its own (or with the process)."""
        self._stop.set()
        self._stopping()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
        self._thread = None

    @property
    def interval_s(self) -> float:
        """Seconds between samples (handed on)."""
        return self._interval

    @property
    def latest(self) -> ProbeSample | None:
        """The most recent sample, None before the first."""
        return self._latest

    @property
    def running(self) -> bool:
        """True while the sampling (or reading) thread is alive."""
        return self._thread is not None and self._thread.is_alive()


class ProbeSampler(SamplerState):
    """Samples every `interval_s` seconds in a daemon thread and calls `on_sample(sample)`
    from that thread (callers hop to their own loop, e.g. Textual's `call_from_thread`).

    self_pids / engine_pids: see `ProcessProbe`. The probes can be injected (tests).
    thresholds: the verdict's thresholds (default: verdict.DEFAULT; the CLI passes the config
    file's).
    engine_threads: the measured engine's compute threads, asked at each sample (None:
    unknown), for the verdict's remedies (`verdict.evaluate`); thread_setting: how that
    engine is given N threads (`verdict.evaluate`'s; None: llmtop's --num-thread).
    energy: an `EnergyReader` sampled first in every sample (a few sysfs reads or NVML calls,
    stamped on the perf_counter_ns clock), so request windows can be integrated; its cost is
    in `cost_ms`.
    measuring: True (the default) reads the GPU and the energy sources in every sample; False
    (`set_measuring`) reads them at most every IDLE_GPU_BEAT_S, reusing the last GPU reading
    in between, so an idle monitor does not keep the GPU awake; a callable is asked at each
    sample (the watch: whether a request is streaming through it now).
    clock: the stamp clock in ns (default `time.perf_counter_ns`; tests pass their own).
    Never raises out of the thread: a failing probe becomes a "probe-error" finding, a
    failing callback is logged, and the loop continues.
    """

    THREAD_NAME = "llmtop-probes"

    def __init__(
        self,
        interval_s: float = 1.0,
        on_sample: Callable[[ProbeSample], None] | None = None,
        self_pids: PidSource | None = None,
        engine_pids: PidSource | None = None,
        *,
        gpu: bool = True,
        system_probe: SystemProbe | None = None,
        process_probe: ProcessProbe | None = None,
        gpu_probe: GpuProbe | None = None,
        thresholds: Thresholds | None = None,
        energy: EnergyReader | None = None,
        engine_threads: Callable[[], int | None] | None = None,
        thread_setting: Callable[[], str | None] | None = None,
        measuring: bool | Callable[[], bool] = True,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self._interval = self._check(interval_s)
        self._measuring = measuring
        self._clock = clock
        self._gpu_read: tuple[int, GpuSample | None] | None = None  # (clock ns, last reading)
        self._engine_threads = engine_threads
        self._thread_setting = thread_setting or (lambda: None)
        self._energy = energy
        self._thresholds = thresholds or DEFAULT
        self._on_sample = on_sample
        self._system = system_probe or SystemProbe()
        self._processes = process_probe or ProcessProbe(self_pids, engine_pids)
        # Apple Silicon: its own GPU probe (probes/apple.py), the same GpuSample shape
        self._gpu = gpu_probe or (apple_gpu_probe() if gpu else None)
        self._lock = threading.Lock()  # one sample at a time (thread vs sample_once)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._latest: ProbeSample | None = None

    @staticmethod
    def _check(interval_s: float) -> float:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        return float(interval_s)

    def set_interval(self, interval_s: float) -> None:
        """Change the period (e.g. faster during a request); takes effect at once.
        Raises ValueError unless interval_s > 0."""
        self._interval = self._check(interval_s)
        self._wake.set()

    def set_measuring(self, measuring: bool | Callable[[], bool]) -> None:
        """True while a request or a bench is measured: the GPU and the energy sources are
        read in every sample; False: at most every IDLE_GPU_BEAT_S (see the constant); a
        callable: asked at each sample."""
        self._measuring = measuring

    @property
    def measuring(self) -> bool:
        """Whether the next sample reads the GPU whatever the beat (see `set_measuring`)."""
        return self._measuring() if callable(self._measuring) else self._measuring

    def _gpu_due(self, now_ns: int) -> bool:
        """Whether this sample reads the GPU and the energy sources: always while measuring,
        else when the last reading is IDLE_GPU_BEAT_S old or more (or there is none)."""
        last = self._gpu_read
        return (self.measuring or last is None
                or now_ns - last[0] >= IDLE_GPU_BEAT_S * 1e9)

    def _read_gpu(self, now_ns: int, errors: list[Finding]) -> GpuSample | None:
        """The GPU reading for a sample taken at `now_ns`: a fresh one when due (energy read
        with it), else the last beat's."""
        if not self._gpu_due(now_ns):
            return self._gpu_read[1] if self._gpu_read is not None else None
        if self._energy is not None:
            self._guard("energy", self._energy.sample, errors)
        gpu = self._guard("gpu", self._gpu.sample, errors) if self._gpu else None
        self._gpu_read = (now_ns, gpu)
        return gpu

    def sample_once(self) -> ProbeSample:
        """Take one sample synchronously (also updates `latest`; no callback). Never raises."""
        with self._lock:
            t_ns = self._clock()
            c0 = _thread_ns()
            wall = datetime.now().astimezone().isoformat(timespec="milliseconds")
            errors: list[Finding] = []
            gpu = self._read_gpu(t_ns, errors)
            system = self._guard("system", self._system.sample, errors)
            processes = self._guard("process", self._processes.sample, errors)
            if system is not None and processes is not None:
                verdict = self._guard(
                    "verdict", lambda: evaluate(system, processes, self._thresholds,
                                                self._threads(), self._thread_setting(),
                                                gpu), errors
                )
            else:
                verdict = None
            found = (verdict.findings if verdict else ()) + tuple(errors)
            sample = ProbeSample(
                t_ns=t_ns,
                wall_time=wall,
                system=system,
                processes=processes,
                gpu=gpu,
                verdict=Verdict.of(found),
                cost_ms=(_thread_ns() - c0 + getattr(self._processes, "last_read_cpu_ns", 0)) / 1e6,
            )
            self._latest = sample
            return sample

    def _threads(self) -> int | None:
        """The engine's compute threads as the caller knows them now (None: unknown)."""
        return self._engine_threads() if self._engine_threads is not None else None

    @staticmethod
    def _guard(what: str, fn: Callable[[], Any], errors: list[Finding]) -> Any:
        try:
            return fn()
        except ProbeTimeout as exc:  # expected on a machine with a stuck process: no traceback
            log.warning("%s probe gave up: %s", what, exc)
            errors.append(_error(what, exc))
            return None
        except Exception as exc:
            log.exception("%s probe failed", what)
            errors.append(_error(what, exc))
            return None

    def _stopping(self) -> None:
        self._wake.set()  # the thread waits on `_wake` between samples

    def _run(self) -> None:
        while not self._stop.is_set():
            started_ns = time.perf_counter_ns()
            self._wake.clear()  # before sampling, so a set_interval() during it is not lost
            try:
                sample = self.sample_once()
                if self._on_sample is not None and not self._stop.is_set():
                    self._on_sample(sample)
            except Exception:  # the callback's error must not kill sampling
                log.exception("probe sample callback failed")
            while not self._stop.is_set():
                left_s = self._interval - (time.perf_counter_ns() - started_ns) / 1e9
                if left_s <= 0 or not self._wake.wait(left_s):
                    break
                self._wake.clear()  # interval changed: recompute the remaining wait
