"""Verdict rules on hand-made samples, with exact values."""

from __future__ import annotations

import dataclasses

from llmtop.probes.catalogue import Category
from llmtop.probes.processes import AppUsage, ProcessSample
from llmtop.probes.system import SystemSample
from llmtop.probes.verdict import (
    DEFAULT,
    REMEDY_UNIDENTIFIED,
    Finding,
    Level,
    Thresholds,
    Verdict,
    background_cpu_percent,
    evaluate,
)

GB = 1024**3

QUIET_SYSTEM = SystemSample(
    cpu_percent=5.0,
    per_cpu=(5.0, 5.0, 5.0, 5.0),
    load_avg_per_core=0.1,
    mem_total=16 * GB,
    mem_available=12 * GB,
    mem_percent=25.0,
    swap_total=2 * GB,
    swap_used=0,
    swap_percent=0.0,
    cpu_freq_mhz=3000.0,
    cpu_freq_max_mhz=4000.0,
    on_battery=False,
    logical_cpus=4,
)


def app(name: str, cpu: float | None, cat: Category = Category.OTHER, n: int = 1) -> AppUsage:
    return AppUsage(name, cat, cpu, 100, n, tuple(range(n)), cat is Category.BROWSER)


def procs(
    *apps: AppUsage, self_cpu: float | None = 2.0, engine: float | None = None, warm: bool = False
) -> ProcessSample:
    return ProcessSample(tuple(apps), self_cpu, engine, warm, len(apps), 4)


def sys_(**changes: object) -> SystemSample:
    return dataclasses.replace(QUIET_SYSTEM, **changes)  # type: ignore[arg-type]


def codes(verdict: Verdict) -> list[tuple[str, Level]]:
    return [(f.code, f.level) for f in verdict.findings]


def test_quiet_machine_is_quiet_with_no_findings() -> None:
    verdict = evaluate(QUIET_SYSTEM, procs(app("bash", 0.5)))
    assert verdict == Verdict(quiet=True, findings=())
    assert verdict.worst is None


def test_busy_browser_finding_carries_value_threshold_and_remedy() -> None:
    verdict = evaluate(sys_(cpu_percent=12.0), procs(app("Chromium", 38.0, Category.BROWSER, 14)))
    assert verdict.quiet is False
    assert verdict.findings == (
        Finding(
            code="browser-busy",
            level=Level.WARN,
            value=38.0,
            threshold=10.0,
            unit="% CPU",
            message="Chromium (14 processes) is using 38 % CPU",
            remedy="close the browser or its busy tabs",
        ),
    )


def test_app_threshold_is_strictly_above_and_fail_above_one_core() -> None:
    at = evaluate(QUIET_SYSTEM, procs(app("indexer", 10.0)))
    above = evaluate(QUIET_SYSTEM, procs(app("indexer", 10.1)))
    core = evaluate(sys_(cpu_percent=20.0), procs(app("cc1plus", 150.0, Category.BUILD)))
    assert at.quiet and at.findings == ()
    assert codes(above) == [("app-busy", Level.WARN)]
    assert codes(core) == [("app-busy", Level.FAIL)]
    assert core.findings[0].threshold == 100.0
    assert core.findings[0].remedy == "wait for the build to finish"


def test_self_and_engine_are_never_noise() -> None:
    p = procs(
        app("llmtop", 80.0, Category.SELF),
        app("llama.cpp", 390.0, Category.ENGINE),
        self_cpu=80.0,
        engine=390.0,
    )
    # machine 100 % busy on 4 CPUs, all of it llmtop + engine: (80 + 390) / 4 = 117.5 → 0
    verdict = evaluate(sys_(cpu_percent=100.0), p)
    assert verdict.quiet and verdict.findings == ()
    assert background_cpu_percent(sys_(cpu_percent=100.0), p) == 0.0


def test_background_cpu_levels_exact() -> None:
    # 40 % machine − (20 + 100) / 4 = 10 % background: below 25, nothing
    assert (
        background_cpu_percent(sys_(cpu_percent=40.0), procs(self_cpu=20.0, engine=100.0)) == 10.0
    )
    # 60 − (0 + 20) / 4 = 55 % → FAIL (> 50)
    fail = evaluate(sys_(cpu_percent=60.0), procs(self_cpu=0.0, engine=20.0))
    assert fail.findings[0] == Finding(
        "background-cpu",
        Level.FAIL,
        55.0,
        50.0,
        "% CPU (machine)",
        # no process in the sample accounts for any of it: said, with its size
        "other programs are using 55 % of the machine's CPU; 55 % of it is in no process "
        "llmtop could read (short-lived processes, or other users' processes hidden from it)",
        # QUIET_SYSTEM has 4 logical CPUs: the small machine's advice, one thread fewer
        # no app is busy in the sample: nothing to name, so where to look (finding K)
        "find what is using the CPU before measuring (no process llmtop can read is busy: look"
        " for other users' processes, e.g. with `top` as root); on 4 CPUs an engine with "
        "a thread per core stalls when another program takes one (decode can fall tenfold): "
        "--num-thread 3 leaves it room",
    )
    # 32 − 8 / 4 = 30 % → WARN (> 25)
    warn = evaluate(sys_(cpu_percent=32.0), procs(self_cpu=8.0))
    assert codes(warn) == [("background-cpu", Level.WARN)]
    assert warn.findings[0].value == 30.0 and warn.findings[0].threshold == 25.0


def test_background_cpu_a_listed_app_explains_needs_no_note() -> None:
    # 60 % machine on 4 CPUs; a hog at 200 % of a core = 50 % of the machine; self 0, engine
    # 20 → background 55; unattributed 55 − 50 = 5 (< 10): no note
    explained = evaluate(sys_(cpu_percent=60.0), procs(app("hog", 200.0), self_cpu=0.0,
                                                       engine=20.0))
    assert explained.findings[0].message.endswith("using 55 % of the machine's CPU")
    # the remedy names it (finding K: "the applications listed below" in `run`, which lists none)
    assert explained.findings[0].remedy.startswith(
        "close the busiest applications before measuring (hog 200 % of one core);"
    )
    # the hog at 80 % of a core = 20 % of the machine: 35 unattributed, >= 55 / 3 → said
    hidden = evaluate(sys_(cpu_percent=60.0), procs(app("hog", 80.0), self_cpu=0.0, engine=20.0))
    assert "; 35 % of it is in no process llmtop could read" in hidden.findings[0].message


def test_the_thread_advice_is_for_small_machines_only() -> None:
    eight = sys_(cpu_percent=60.0, logical_cpus=8, per_cpu=(60.0,) * 8)
    big = evaluate(eight, procs(app("a", 300.0), app("b", 90.0), app("c", 40.0),
                                app("d", 30.0), app("e", 4.0), self_cpu=0.0))
    # the three busiest by name (d is the 4th, e under NAMED_MIN_PERCENT); no thread advice
    assert big.findings[0].remedy == (
        "close the busiest applications before measuring (a 300 %, b 90 %, c 40 % of one core)"
    )
    two = evaluate(sys_(cpu_percent=60.0, logical_cpus=2, per_cpu=(60.0, 60.0)),
                   procs(self_cpu=0.0))
    assert two.findings[0].remedy.endswith("--num-thread 1 leaves it room")
    # new-user pass N7: advised "--num-thread 1" while the header said "1 thread": an engine
    # known to run fewer threads than cores gets no thread advice; one with 2 still does
    one = evaluate(sys_(cpu_percent=60.0, logical_cpus=2, per_cpu=(60.0, 60.0)),
                   procs(self_cpu=0.0), engine_threads=1)
    assert "--num-thread" not in one.findings[0].remedy
    both = evaluate(sys_(cpu_percent=60.0, logical_cpus=2, per_cpu=(60.0, 60.0)),
                    procs(self_cpu=0.0), engine_threads=2)
    assert both.findings[0].remedy.endswith("--num-thread 1 leaves it room")


def test_the_engines_threads_as_the_connection_knows_them() -> None:
    from llmtop.engines.connection import Connection

    conn = Connection(engine=None, model="m", info=None, version=None,  # type: ignore[arg-type]
                      engine_config={"use_extra_bufts": False, "threads": 1})
    assert conn.compute_threads() == 1  # the embedded engine's default
    assert conn.compute_threads({"num_thread": 2}) == 2  # the request's option wins
    assert Connection(engine=None, model="m", info=None,  # type: ignore[arg-type]
                      version=None).compute_threads() is None  # another engine: unknown


def test_warming_up_skips_cpu_rules_but_not_memory() -> None:
    p = procs(app("Chromium", None, Category.BROWSER, 3), self_cpu=None, warm=True)
    verdict = evaluate(sys_(cpu_percent=None, per_cpu=()), p)
    assert verdict.quiet is True
    assert codes(verdict) == [("warming-up", Level.INFO)]
    low = evaluate(sys_(cpu_percent=None, mem_available=GB), p)  # 1/16 = 6.25 % available
    assert codes(low) == [("memory-low", Level.WARN), ("warming-up", Level.INFO)]


def test_memory_and_swap_rules() -> None:
    warn = evaluate(sys_(mem_available=int(16 * GB * 0.08)), procs())
    fail = evaluate(sys_(mem_available=int(16 * GB * 0.04)), procs())
    swap = evaluate(sys_(swap_used=GB, swap_percent=30.0), procs())
    no_swap = evaluate(sys_(swap_total=0, swap_percent=0.0), procs())
    assert codes(warn) == [("memory-low", Level.WARN)] and warn.findings[0].value == 8.0
    assert codes(fail) == [("memory-low", Level.FAIL)] and fail.findings[0].threshold == 5.0
    assert codes(swap) == [("swap-used", Level.WARN)] and swap.findings[0].value == 30.0
    assert no_swap.findings == ()


def test_battery_rule_only_when_known_on_battery() -> None:
    assert codes(evaluate(sys_(on_battery=True), procs())) == [("on-battery", Level.WARN)]
    assert evaluate(sys_(on_battery=None), procs()).findings == ()


def test_slow_clock_warns_when_busy_and_informs_when_idle() -> None:
    busy = evaluate(sys_(cpu_freq_mhz=1000.0, cpu_percent=30.0), procs(self_cpu=100.0))
    idle = evaluate(sys_(cpu_freq_mhz=1000.0, cpu_percent=3.0), procs())
    unknown = evaluate(sys_(cpu_freq_mhz=1000.0, cpu_freq_max_mhz=None), procs())
    assert codes(busy) == [("cpu-slow", Level.WARN)]
    assert busy.findings[0].value == 25.0 and busy.findings[0].threshold == 50.0
    assert codes(idle) == [("cpu-slow", Level.INFO)] and idle.quiet
    assert unknown.findings == ()


def test_other_engine_is_reported_and_findings_sorted_worst_first() -> None:
    p = procs(app("Ollama", 0.0, Category.INFERENCE), app("Firefox", 200.0, Category.BROWSER))
    p = dataclasses.replace(p, engine_identified=True)  # so Ollama is another engine
    verdict = evaluate(sys_(cpu_percent=20.0, on_battery=True), p)
    assert codes(verdict) == [
        ("browser-busy", Level.FAIL),
        ("on-battery", Level.WARN),
        ("other-engine", Level.INFO),
    ]
    assert verdict.worst is Level.FAIL


def test_custom_thresholds() -> None:
    strict = Thresholds(app_cpu_warn=1.0)
    assert evaluate(QUIET_SYSTEM, procs(app("x", 2.0)), strict).quiet is False
    assert evaluate(QUIET_SYSTEM, procs(app("x", 2.0)), DEFAULT).quiet is True


def test_steal_swapping_and_heat_rules():
    import dataclasses

    from llmtop.probes.processes import ProcessSample
    from llmtop.probes.system import SystemSample
    from llmtop.probes.verdict import evaluate

    base = SystemSample(
        cpu_percent=10.0,
        per_cpu=(10.0,),
        load_avg_per_core=0.1,
        mem_total=100,
        mem_available=90,
        mem_percent=10.0,
        swap_total=0,
        swap_used=0,
        swap_percent=0.0,
        cpu_freq_mhz=None,
        cpu_freq_max_mhz=None,
        on_battery=False,
    )
    procs = ProcessSample(apps=(), self_cpu_percent=0.0, engine_cpu_percent=None, warming_up=False)
    assert evaluate(base, procs).quiet
    # 7.5 % steal > 5 %; 3 MiB/s swapped in > 1 MiB/s; 96 °C >= its 95 °C high mark
    noisy = dataclasses.replace(
        base,
        steal_percent=7.5,
        swap_in_bps=3 * 1024 * 1024,
        temperature_c=96.0,
        temperature_high_c=95.0,
    )
    found = {f.code: f for f in evaluate(noisy, procs).findings}
    assert found["cpu-steal"].value == 7.5 and found["cpu-steal"].threshold == 5.0
    assert found["swapping"].value == 3.0 and found["swapping"].unit == "MiB/s"
    assert found["hot"].value == 96.0 and found["hot"].threshold == 95.0
    # just under each threshold: quiet
    calm = dataclasses.replace(
        base,
        steal_percent=5.0,
        swap_out_bps=1024 * 1024,
        temperature_c=94.0,
        temperature_high_c=95.0,
    )
    assert evaluate(calm, procs).quiet


def test_cpu_of_a_process_just_started_is_said_so_not_unreadable() -> None:
    # new-user pass D2: 60 % machine on 4 CPUs, self 0, engine 20 → background 55; the burner
    # started since the last sample has no reading yet (None): its CPU is the 55 % unlisted
    fresh = evaluate(sys_(cpu_percent=60.0), procs(app("burner", None), self_cpu=0.0,
                                                   engine=20.0))
    assert fresh.findings[0].message == (
        "other programs are using 55 % of the machine's CPU; 55 % of it is not in any app's "
        "figure yet: burner started since the last sample (a new process's CPU is known from "
        "its second reading)")


def test_an_engine_just_started_is_not_counted_as_other_programs() -> None:
    # second new-user pass (N20): 91 % of the machine "other programs" in the TUI's first
    # NOISY frame, 80 % of it the engine llmtop had just started, its CPU not yet known
    fresh = dataclasses.replace(procs(self_cpu=0.0), engine_identified=True)
    verdict = evaluate(sys_(cpu_percent=91.0), fresh)
    assert codes(verdict) == [("background-cpu-unknown", Level.INFO)]
    assert verdict.quiet
    known = dataclasses.replace(procs(self_cpu=0.0, engine=160.0), engine_identified=True)
    # 91 % of 4 CPUs − 160 % of one core / 4 = 51 %: judged once the engine's CPU is known
    assert ("background-cpu", Level.FAIL) in codes(evaluate(sys_(cpu_percent=91.0), known))


def test_busy_engines_not_told_from_the_measured_one_are_named_not_looked_for() -> None:
    # two inference engines busy and the measured engine's pids not identified: the remedy
    # names them (stop those not measured) and the pid advice follows; never "no process
    # llmtop can read is busy", which they are. 4 CPUs: (98 + 95) / 4 = 48.25 % of the
    # machine is theirs; the machine at 60 %: 60 − 0 (no self, no engine) = 60 % background
    p = procs(app("llama.cpp", 98.0, Category.INFERENCE),
              app("llmtop engine", 95.0, Category.INFERENCE), self_cpu=0.0)
    (f,) = [f for f in evaluate(sys_(cpu_percent=60.0), p).findings
            if f.code == "background-cpu"]
    assert f.value == 60.0 and f.level is Level.FAIL
    assert f.message.startswith("other programs are using 60 % of the machine's CPU (this "
                                "includes llama.cpp, llmtop engine, which may be the "
                                "measured engine)")
    assert f.remedy.startswith("stop the inference engines you are not measuring before "
                               "measuring (llama.cpp 98 %, llmtop engine 95 % of one core)")
    assert "no process llmtop can read" not in f.remedy
    assert f.remedy.endswith(REMEDY_UNIDENTIFIED)
