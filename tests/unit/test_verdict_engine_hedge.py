"""The verdict never tells the user to stop the engine being measured: an inference engine is
"other" only once the measured engine's own pids were identified."""

from __future__ import annotations

import dataclasses

from llmtop.probes.catalogue import Category
from llmtop.probes.processes import AppUsage, ProcessSample
from llmtop.probes.system import SystemSample
from llmtop.probes.verdict import REMEDY_UNIDENTIFIED, Level, evaluate

GIB = 1 << 30
# 4 CPUs, memory plentiful, no clock, battery or swap readings: only CPU rules can fire.
QUIET_SYSTEM = SystemSample(5.0, (), None, 16 * GIB, 12 * GIB, 25.0, 0, 0, 0.0, None, None, None, 4)

RUNNER = AppUsage("Ollama", Category.INFERENCE, 300.0, 4 << 30, 2, (900, 901), False, 75.0)


def sample(identified: bool, engine_cpu: float | None) -> ProcessSample:
    return ProcessSample((RUNNER,), 2.0, engine_cpu, False, 2, 4, engine_identified=identified)


def test_unidentified_busy_engine_is_info_and_never_stop_it() -> None:
    # 4 CPUs; machine 80 %; llmtop 2 % of a core → background = 80 − 2/4 = 79.5 % (FAIL > 50):
    # the runner's 300 % (75 % of the machine) may be the engine, so the message says so.
    verdict = evaluate(dataclasses.replace(QUIET_SYSTEM, cpu_percent=80.0), sample(False, None))
    assert [(f.code, f.level, f.value) for f in verdict.findings] == [
        ("background-cpu", Level.FAIL, 79.5),
        ("possible-engine", Level.INFO, 300.0),
    ]
    bg, maybe = verdict.findings
    assert bg.message.endswith("(this includes Ollama, which may be the measured engine)")
    assert bg.remedy.endswith(REMEDY_UNIDENTIFIED)
    assert maybe.message.startswith("an inference engine is running: Ollama (2 processes); it may")
    assert maybe.remedy == REMEDY_UNIDENTIFIED
    assert not any("stop the other inference engine" in f.remedy for f in verdict.findings)


def test_identified_engine_is_judged_out_and_quiet() -> None:
    # The runner is the engine here (category ENGINE, 300 % = 75 % of 4 CPUs removed):
    # background = 80 − (2 + 300) / 4 = 4.5 % → QUIET.
    engine = dataclasses.replace(RUNNER, category=Category.ENGINE)
    procs = dataclasses.replace(sample(True, 300.0), apps=(engine,))
    verdict = evaluate(dataclasses.replace(QUIET_SYSTEM, cpu_percent=80.0), procs)
    assert verdict.quiet and verdict.findings == ()


def test_another_engine_besides_an_identified_one_is_still_named() -> None:
    verdict = evaluate(QUIET_SYSTEM, sample(True, 10.0))
    busy = [f for f in verdict.findings if f.code == "app-busy"]
    assert [(f.level, f.value) for f in busy] == [(Level.FAIL, 300.0)]
    assert busy[0].remedy == "stop the other inference engine: it competes for CPU, memory and GPU"
