"""`llmtop watch` identifies the engine behind `--upstream` by its listening socket, as
`preflight --host` does, so the engine's own CPU is the engine's, never background load with
a remedy that says to close it; a remedy's thread advice is said in that engine's terms; an
idle watch logs one probe sample every 10 s and each change, as a TUI session does."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

from llmtop.probes.catalogue import Category, classify
from llmtop.probes.engine_identity import SOCKET_OWNER, EngineIdentity
from llmtop.probes.processes import Identity, ProcReading, group
from llmtop.probes.sampler import ProbeSample
from llmtop.probes.system import SystemSample
from llmtop.probes.verdict import Finding, Level, Verdict, evaluate
from llmtop.sessions.records.log import read_log
from llmtop.sessions.runners.watch.serving import (
    RECHECK_S,
    THREAD_SETTING_UNKNOWN,
    UpstreamEngines,
    probe_sampler,
)
from llmtop.sessions.runners.watch.session import WatchSession

GB = 1024**3
# two CPUs, 60 % busy: an engine at 100 % of one core (50 % of the machine) and 10 % else
BUSY_2CPU = SystemSample(
    cpu_percent=60.0, per_cpu=(100.0, 20.0), load_avg_per_core=0.6, mem_total=16 * GB,
    mem_available=12 * GB, mem_percent=25.0, swap_total=0, swap_used=0, swap_percent=0.0,
    cpu_freq_mhz=None, cpu_freq_max_mhz=None, on_battery=False, logical_cpus=2)
ENGINE_PID, WATCH_PID, OTHER_PID = 4242, 100, 300


def _rows():
    # the engine a user started with `llmtop engine` (console script: psutil's name "llmtop"),
    # 100 % of one core; the watch itself 2 %; a shell 1 %
    engine = classify("llmtop", None, ["/venv/bin/python", "/venv/bin/llmtop", "engine",
                                       "--port", "11500"])
    assert engine is not None  # the catalogue knows `llmtop engine` as an inference engine
    return [
        (ProcReading(ENGINE_PID, "llmtop", 100.0, 300 * 2**20),
         Identity(engine.app, engine.category)),
        (ProcReading(WATCH_PID, "llmtop", 2.0, 80 * 2**20), Identity("llmtop", Category.OTHER)),
        (ProcReading(OTHER_PID, "bash", 1.0, 4 * 2**20), Identity("bash", Category.OTHER)),
    ]


def test_the_engine_behind_the_watch_is_the_engine_not_background():
    # before: no engine pids; the engine's 100 % of one core is 50 % of the machine, above
    # the background-cpu threshold, and the remedy named the engine to close
    unidentified = group(_rows(), self_pids={WATCH_PID}, cpus=2)
    before = evaluate(BUSY_2CPU, unidentified)
    assert not before.quiet
    # with the pids the watch's identification gives (the socket's owner)
    identified = group(_rows(), self_pids={WATCH_PID}, engine_pids={ENGINE_PID}, cpus=2)
    (engine_app,) = [a for a in identified.apps if ENGINE_PID in a.pids]
    assert engine_app.category is Category.ENGINE and engine_app.app == "llmtop engine"
    assert identified.engine_cpu_percent == 100.0
    after = evaluate(BUSY_2CPU, identified)
    # background = 60 − (2 + 100) / 2 = 9 % of the machine: under the 25 % warning
    assert after.quiet, [f.message for f in after.findings]
    assert not any("llmtop engine" in f.remedy and "close" in f.remedy for f in after.findings)


def test_the_catalogue_tells_llmtop_engine_from_another_llmtop():
    script = ["/venv/bin/python", "/venv/bin/llmtop"]
    assert classify("llmtop", None, [*script, "engine"]).app == "llmtop engine"
    assert classify("python3", None, ["python3", "-m", "llmtop", "engine"]).app == "llmtop engine"
    # the TUI, a watch, a bench: not an engine (the process probe calls them llmtop)
    assert classify("llmtop", None, [*script, "watch", "--json"]) is None
    assert classify("llmtop", None, [*script, "--engine", "embedded"]) is None


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_upstream_engines_look_again_only_when_due():
    looks: list[str] = []
    me = os.getpid()  # a pid that exists for as long as the test runs

    def identify(url: str) -> EngineIdentity:
        looks.append(url)
        return EngineIdentity(url, frozenset({me}), SOCKET_OWNER, (), "llama.cpp")

    clock = _Clock()
    engines = UpstreamEngines(["http://127.0.0.1:8080", "http://127.0.0.1:8080"],
                              identify=identify, clock=clock)
    assert me in engines()
    assert looks == ["http://127.0.0.1:8080"]  # one look per distinct upstream
    clock.now = RECHECK_S - 0.1
    engines()
    assert len(looks) == 1
    clock.now = RECHECK_S
    engines()
    assert len(looks) == 2
    assert engines.thread_setting() == "restarting llama-server with --threads {n}"


def test_an_engine_that_ended_is_looked_for_at_once():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    answers = iter([frozenset({dead.pid}), frozenset({os.getpid()})])
    looks = []

    def identify(url: str) -> EngineIdentity:
        looks.append(url)
        return EngineIdentity(url, next(answers), SOCKET_OWNER)

    engines = UpstreamEngines(["http://127.0.0.1:1"], identify=identify, clock=_Clock())
    engines()
    assert engines() >= {os.getpid()} and len(looks) == 2  # the first one's pid had ended


def test_thread_advice_fits_the_engine():
    # 2 CPUs, other programs at 40 % of the machine: the remedy gives the engine 2 − 1 threads
    system = dataclasses.replace(BUSY_2CPU, cpu_percent=45.0)
    rows = [(ProcReading(OTHER_PID, "burn", 80.0, 2**20), Identity("burn", Category.OTHER))]
    procs = group(rows, self_pids={WATCH_PID}, cpus=2)

    def remedy(verdict: Verdict) -> str:
        (found,) = [f for f in verdict.findings if f.code == "background-cpu"]
        return found.remedy

    own = remedy(evaluate(system, procs))
    assert own.endswith("--num-thread 1 leaves it room")  # llmtop's own runs: its flag
    said = remedy(evaluate(system, procs,
                           thread_setting="restarting llama-server with --threads {n}"))
    assert said.endswith("restarting llama-server with --threads 1 leaves it room")
    unknown = UpstreamEngines(["http://127.0.0.1:1"], identify=lambda u: EngineIdentity(u))
    unknown()
    assert unknown.thread_setting() == THREAD_SETTING_UNKNOWN


def test_the_watch_probes_find_the_process_listening_on_the_upstream_port():
    # a real process owning a listening socket, busy on one core: what a local engine is
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    code = (f"import socket,time\ns=socket.socket()\ns.bind(('127.0.0.1',{port}))\n"
            "s.listen()\nprint('up',flush=True)\nt=time.monotonic()\n"
            "while time.monotonic()-t<30: pass\n")
    engine = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert engine.stdout.readline().strip() == "up"
        engines = UpstreamEngines([f"http://127.0.0.1:{port}"])
        (identity,) = engines.identities()
        assert identity.how == SOCKET_OWNER and engine.pid in identity.pids
        sampler = probe_sampler(1.0, None, engines)
        sampler.sample_once()  # primes the CPU readings
        time.sleep(0.5)  # a CPU window to read, not a timing assert
        sample = sampler.sample_once()
        procs = sample.processes
        (app,) = [a for a in procs.apps if engine.pid in a.pids]
        assert app.category is Category.ENGINE
        assert procs.engine_cpu_percent is not None and procs.engine_cpu_percent > 0
        assert not any(str(engine.pid) in f.message for f in sample.verdict.findings)
    finally:
        engine.kill()
        engine.wait()


def _sample(t_ns: int, noisy: bool = False) -> ProbeSample:
    busy = Finding("app-busy", Level.WARN, 30.0, 10.0, "% CPU", "x is busy", "close it")
    return ProbeSample(t_ns, "2026-01-01T00:00:00+00:00", None, None, None,
                       Verdict.of([busy] if noisy else []), 0.1)


def test_an_idle_watch_logs_one_sample_in_ten_seconds_and_every_change(tmp_path):
    path = tmp_path / "w.jsonl"
    session = WatchSession([("127.0.0.1:1", "http://127.0.0.1:2")], log_path=str(path))
    start = session.active_ns + 6 * 10**9  # 6 s after the watch started: idle
    # 60 samples at 1 Hz, QUIET but for one NOISY at k = 35. Logged: k 0, then 10 s after
    # the last logged (10, 20, 30), the change to NOISY (35) and back (36), then 46, 56:
    # 8 of 60
    for k in range(60):
        session.sampled(_sample(start + k * 10**9, noisy=k == 35))
    # a request streaming: every sample logged, and for 5 s after it ended
    session.streaming[1] = SimpleNamespace()
    for k in range(60, 63):
        session.sampled(_sample(start + k * 10**9))
    session.streaming.clear()
    session.active_ns = start + 62 * 10**9  # it ended at k = 62
    for k in range(63, 70):  # 63–67 within 5 s of the end: logged; 68, 69 idle, like 67
        session.sampled(_sample(start + k * 10**9))
    session.close()
    assert session.probes_thinned == 52 + 2
    assert len(read_log(path).probes) == 8 + 3 + 5
