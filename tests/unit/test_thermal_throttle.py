"""Throttling per request: thermal zones at a trip point, hwmon temperatures at their limit and
NVML's power and thermal reasons (probes/thermal.py), carried by each bench request's
`machine.throttle`. Fake /sys/class trees with the files and units the kernel documents
(thermal zones: type, temp and trip_point_K_type/_temp in m°C; hwmon: name, tempK_input,
tempK_max/_crit, tempK_label in m°C), read by the reader and, with the tree mounted over
/sys/class in a private mount namespace, by the real MachineReader with its default roots."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from llmtop.probes.gpu import GpuClocks
from llmtop.probes.machine_speed import MachineReading, interval
from llmtop.probes.thermal import ThermalReader, Throttle, find_zones, gpu_throttles
from tests.unit.test_gpu_sysfs import _write, needs_namespace


def laptop(cls: Path, pkg_mc: int = 97_000, edge_mc: int = 60_000) -> None:
    """A laptop's /sys/class: the CPU package zone (x86_pkg_temp) with a passive trip at
    95 °C and a critical one at 105 °C, an ACPI zone at 40 °C (trips active 70, critical
    110), a disabled zone, coretemp at 80 °C against max 100 °C, and an amdgpu whose edge
    sensor has crit 100 °C."""
    _write(cls / "thermal" / "thermal_zone0", {
        "type": "acpitz\n", "temp": "40000\n", "mode": "enabled\n",
        "trip_point_0_type": "active\n", "trip_point_0_temp": "70000\n",
        "trip_point_1_type": "critical\n", "trip_point_1_temp": "110000\n"})
    _write(cls / "thermal" / "thermal_zone1", {
        "type": "x86_pkg_temp\n", "temp": f"{pkg_mc}\n",
        "trip_point_0_type": "critical\n", "trip_point_0_temp": "105000\n",
        "trip_point_1_type": "passive\n", "trip_point_1_temp": "95000\n"})
    _write(cls / "thermal" / "thermal_zone2", {
        "type": "iwlwifi_1\n", "temp": "200000\n", "mode": "disabled\n",
        "trip_point_0_type": "passive\n", "trip_point_0_temp": "50000\n"})
    (cls / "thermal" / "cooling_device0").mkdir(parents=True)  # not a zone
    _write(cls / "hwmon" / "hwmon1", {
        "name": "coretemp\n", "temp1_input": "80000\n", "temp1_max": "100000\n",
        "temp1_crit": "100000\n", "temp1_label": "Package id 0\n"})
    _write(cls / "hwmon" / "hwmon4", {
        "name": "amdgpu\n", "temp1_input": f"{edge_mc}\n", "temp1_crit": "100000\n",
        "temp1_label": "edge\n", "device/power/runtime_status": "active\n"})


def test_the_lowest_counted_trip_of_each_enabled_zone_is_watched(tmp_path: Path) -> None:
    laptop(tmp_path)
    zones = find_zones(tmp_path / "thermal")
    # acpitz: its active trip starts a fan only, so its critical 110 °C is the limit;
    # x86_pkg_temp: passive 95 °C is below critical 105 °C; the disabled zone is skipped
    assert [(z.device, z.limit_value, z.limit, z.part) for z in zones] == [
        ("thermal_zone0 acpitz", 110.0, "critical trip", "machine"),
        ("thermal_zone1 x86_pkg_temp", 95.0, "passive trip", "CPU"),
    ]


def test_a_zone_past_its_passive_trip_is_a_cpu_thermal_throttle(tmp_path: Path) -> None:
    laptop(tmp_path)
    reader = ThermalReader(tmp_path / "thermal", tmp_path / "hwmon")
    # 97 °C >= passive 95 °C; acpitz 40 < 110, coretemp 80 < 100, amdgpu edge 60 < 100
    assert reader.read() == (Throttle("CPU", "thermal", "thermal_zone",
                                      "thermal_zone1 x86_pkg_temp",
                                      "97.0 °C >= passive trip 95.0 °C"),)
    _write(tmp_path / "thermal" / "thermal_zone1", {"temp": "94999\n"})
    _write(tmp_path / "hwmon" / "hwmon4", {"temp1_input": "101000\n"})
    # the zone cooled under its trip; the GPU's edge reached its crit limit
    assert reader.read() == (Throttle("GPU", "thermal", "hwmon", "hwmon4 amdgpu edge",
                                      "101.0 °C >= crit 100.0 °C"),)
    _write(tmp_path / "hwmon" / "hwmon4", {"device/power/runtime_status": "suspended\n"})
    assert reader.read() == ()  # an asleep GPU is not read (it would wake)


def test_unreadable_or_absent_trees_give_no_throttle(tmp_path: Path) -> None:
    assert ThermalReader(tmp_path / "none", tmp_path / "none").read() == ()
    laptop(tmp_path)
    _write(tmp_path / "thermal" / "thermal_zone1", {"temp": "n/a\n"})
    assert ThermalReader(tmp_path / "thermal", tmp_path / "none").read() == ()


def test_nvml_reasons_that_hold_a_gpu_back() -> None:
    clocks = (GpuClocks(0, 1410, 1410, 2619, ("gpu_idle", "sw_power_cap")),
              GpuClocks(1, 990, 990, 2619, ("hw_thermal_slowdown", "sync_boost")),
              GpuClocks(2, None, None, None, None))
    assert gpu_throttles(clocks) == (
        Throttle("GPU", "power", "nvml", "gpu0", "sw_power_cap"),
        Throttle("GPU", "thermal", "nvml", "gpu1", "hw_thermal_slowdown"),
    )


def _reading(t_ns: int, *throttles: Throttle) -> MachineReading:
    return MachineReading(t_ns, None, (), None, (), throttles)


def test_a_request_carries_what_either_edge_saw_once_per_sensor() -> None:
    hot = Throttle("CPU", "thermal", "thermal_zone", "thermal_zone1 x86_pkg_temp",
                   "96.0 °C >= passive trip 95.0 °C")
    hotter = Throttle("CPU", "thermal", "thermal_zone", "thermal_zone1 x86_pkg_temp",
                      "98.0 °C >= passive trip 95.0 °C")
    cap = Throttle("GPU", "power", "nvml", "gpu0", "sw_power_cap")
    got = interval(_reading(0, hot), _reading(10**9, cap, hotter)).throttle
    assert got == (hotter, cap)  # the zone once, at its end temperature


def test_the_record_keeps_the_throttles_typed() -> None:
    from dataclasses import asdict

    from llmtop.sessions.records.request import MachineRecord, ThrottleRecord
    from llmtop.sessions.records.schema import decode, fast_decode

    cap = Throttle("GPU", "power", "nvml", "gpu0", "sw_power_cap")
    machine = asdict(interval(_reading(0), _reading(10**9, cap)))
    line = json.dumps({"type": "request", "id": 1, "t_send_ns": 1, "prompt": "p",
                       "status": "ok", "machine": machine})
    for record in (decode(line), fast_decode(line)):
        assert record is not None and record.machine is not None
        assert record.machine.throttle == (ThrottleRecord("GPU", "power", "nvml", "gpu0",
                                                          "sw_power_cap"),)
        assert record.machine.throttle[0].phrase == "the GPU was power-capped"
    old = json.dumps({"type": "request", "id": 1, "t_send_ns": 1, "prompt": "p",
                      "status": "ok", "machine": {"seconds": 1.0}})
    record = decode(old)  # a log from before throttles were read: none, not an error
    assert record.machine == MachineRecord(seconds=1.0)


@needs_namespace
def test_machine_reader_sees_a_hot_package_through_sys_class(tmp_path: Path) -> None:
    laptop(tmp_path / "class", pkg_mc=99_500)
    code = ("from llmtop.probes.machine_speed import MachineReader\n"
            "from llmtop.probes.gpu import GpuProbe\n"
            "r = MachineReader((), GpuProbe(nvml=object(), drm_root=None)).read()\n"
            "print([(t.part, t.cause, t.device, t.detail) for t in r.throttles])\n")
    script = (f"mount --bind {tmp_path / 'class'} /sys/class && exec timeout -s KILL 60 "
              f"{sys.executable} -c '{code}'")
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                          text=True, check=False, timeout=120, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str([("CPU", "thermal", "thermal_zone1 x86_pkg_temp",
                                        "99.5 °C >= passive trip 95.0 °C")])


# --- the episode's cause names the throttle ----------------------------------------------

PKG_HOT = {"part": "CPU", "cause": "thermal", "source": "thermal_zone",
           "device": "thermal_zone1 x86_pkg_temp", "detail": "97.0 °C >= passive trip 95.0 °C"}
GPU_CAP = {"part": "GPU", "cause": "power", "source": "nvml", "device": "gpu0",
           "detail": "sw_power_cap"}


def throttled_from_eleven(*throttle: dict[str, str]):  # type: ignore[no-untyped-def]
    """The drift tests' run (tests/unit/test_drift_rule.py): decode 22.0 tok/s for requests
    1–10, 19.36 (−12 %) for 11–20, a steady 3 ms canary; requests 11–20 saw `throttle` at
    their edges (NVML's reasons also in their GPU clocks, held at 1410 of 1980 MHz, as a
    bench writes them)."""
    from llmtop.sessions.records.request import RequestRecord
    from llmtop.sessions.records.schema import CanaryRecord
    from tests.unit.test_analysis_report import record_json
    from tests.unit.test_drift_rule import ENGINE_FAST, ENGINE_SLOW, canary_json, wobbled

    reqs = []
    for i, tps in enumerate(wobbled(ENGINE_FAST, ENGINE_SLOW)):
        rec = record_json(i, tps)
        hot = list(throttle) if i >= 10 else []
        reasons = [t["detail"] for t in hot if t["source"] == "nvml"]
        rec["machine"] = {"seconds": 5.0, "throttle": hot, "gpu": [
            {"index": 0, "graphics_mhz": 1410 if reasons else 1980,
             "throttle_reasons": reasons}]}
        reqs.append(RequestRecord.from_json(rec))
    return reqs, [CanaryRecord.from_json(canary_json(i + 1, 3.0)) for i in range(20)]


def test_an_episode_under_a_power_cap_says_the_gpu_was_power_capped() -> None:
    from tests.unit.test_drift_rule import build_from

    report = build_from(*throttled_from_eleven(GPU_CAP))
    (episodes,) = report.episodes.values()
    (episode,) = episodes
    # decode 22.0 → 19.36 tok/s: 22.0 / 19.36 − 1 = 13.6 % slower in time
    assert episode.sentence == ("the GPU was power-capped during requests 11–20; decode "
                                "(server) ran 14 % slower then")
    assert episode.to_dict()["throttled"] == ["the GPU was power-capped"]
    (cause,) = report.causes.values()  # the drift's cause: NVML's reason, said once
    assert cause.kind == "machine"
    assert cause.summary.endswith("the GPU's clocks fell 1980 → 1410 MHz (sw_power_cap)")
    assert "power-capped (" not in cause.summary


def test_an_episode_at_a_thermal_trip_names_the_zone() -> None:
    from tests.unit.test_drift_rule import build_from

    report = build_from(*throttled_from_eleven(PKG_HOT))
    (episode,) = next(iter(report.episodes.values()))
    assert episode.sentence.startswith("the CPU was at its thermal limit during requests "
                                       "11–20; decode (server) ran 14 % slower")
    (cause,) = report.causes.values()
    assert cause.kind == "machine"
    assert cause.summary.endswith("the CPU was at its thermal limit (thermal_zone1 "
                                  "x86_pkg_temp: 97.0 °C >= passive trip 95.0 °C)")


def test_a_throttle_the_fast_requests_had_too_is_no_cause() -> None:
    from llmtop.sessions.analysis.machine import new_throttles

    reqs, _ = throttled_from_eleven(GPU_CAP)
    slow, fast = reqs[10:], reqs[:10]
    assert new_throttles(slow, fast) == (("the GPU was power-capped", "gpu0: sw_power_cap"),)
    assert new_throttles(slow, fast, nvml=False) == ()
    assert new_throttles(slow, slow[:3]) == ()  # seen by both groups: not what changed


def test_request_numbers_read_as_ranges() -> None:
    from llmtop.sessions.analysis.machine import number_ranges

    assert number_ranges([13, 8, 9, 10, 10]) == "8–10, 13"
    assert number_ranges([4]) == "4" and number_ranges([]) == ""


def test_the_report_says_which_requests_saw_each_throttle() -> None:
    from llmtop.sessions.reports.formats import render
    from tests.unit.test_drift_rule import build_from

    report = build_from(*throttled_from_eleven(PKG_HOT, GPU_CAP))
    said = [("the CPU was at its thermal limit during requests 11–20 (thermal_zone1 "
             "x86_pkg_temp: 97.0 °C >= passive trip 95.0 °C)"),
            "the GPU was power-capped during requests 11–20 (gpu0: sw_power_cap)"]
    md = render(report, "md")
    section = md[md.index("## Was the machine quiet?"):].split("\n## ", 1)[0]
    assert [line.split(": ", 1)[1] for line in section.splitlines()
            if "during requests 11–20 (" in line] == said
    assert json.loads(render(report, "json"))["sizes"][0]["throttles"] == said


@needs_namespace
def test_a_bench_under_a_hot_package_records_it_per_request(tmp_path: Path) -> None:
    """The real bench, its /sys/class the fake laptop's with the package at 99.5 °C (past
    its 95 °C passive trip): every measured request's record carries the CPU's thermal
    throttle, and the report says which requests saw it."""
    import os

    from llmtop.sessions.records.log import read_log
    from llmtop.sessions.records.request import ThrottleRecord
    from llmtop.testing.scripted import ScriptedUpstream, Timing

    laptop(tmp_path / "class", pkg_mc=99_500)
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"question {i}"}) + "\n" for i in range(3)))
    log = tmp_path / "bench.jsonl"
    root = Path(__file__).resolve().parents[2]
    with ScriptedUpstream(Timing(first_s=0.02, chunks=5, gap_s=0.01)) as up:
        script = (f"mount --bind {tmp_path / 'class'} /sys/class && exec timeout -s KILL 200 "
                  f"{sys.executable} -m llmtop --engine ollama --host {up.url} --model timed "
                  f"bench --dataset {data} --max-tokens 5 --preflight-duration 0 "
                  f"--no-remeasure --no-save-curve --log {log}")
        done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                              text=True, check=False, timeout=300, cwd=root,
                              env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode in (0, 1), done.stderr  # 1: this shared machine made it NOISY
    measured = [r for r in read_log(log).requests if r.phase == "measure"]
    hot = ThrottleRecord("CPU", "thermal", "thermal_zone", "thermal_zone1 x86_pkg_temp",
                         "99.5 °C >= passive trip 95.0 °C")
    assert measured and all(r.machine is not None and r.machine.throttle == (hot,)
                            for r in measured)
    numbers = f"1–{len(measured)}" if len(measured) > 1 else "1"
    assert (f"the CPU was at its thermal limit during requests {numbers} (thermal_zone1 "
            "x86_pkg_temp: 99.5 °C >= passive trip 95.0 °C)") in done.stdout


def test_one_requests_throttles_are_one_warn() -> None:
    from llmtop.sessions.analysis.machine import throttle_finding
    from llmtop.sessions.records.request import ThrottleRecord

    assert throttle_finding(()) is None
    f = throttle_finding((ThrottleRecord(**GPU_CAP), ThrottleRecord(**PKG_HOT)))
    assert f is not None and (f.code, f.level, f.value) == ("throttled", "warn", 2.0)
    assert f.message == ("the GPU was power-capped (gpu0: sw_power_cap) and the CPU was at "
                         "its thermal limit (thermal_zone1 x86_pkg_temp: 97.0 °C >= passive "
                         "trip 95.0 °C) during the request")


@needs_namespace
def test_run_says_the_request_ran_at_a_thermal_limit(tmp_path: Path) -> None:
    """`llmtop run` against a scripted Ollama here, /sys/class the hot laptop's: the record
    carries the throttle and --json's findings have the WARN."""
    import os

    from llmtop.sessions.records.log import read_log
    from llmtop.testing.scripted import ScriptedUpstream, Timing

    laptop(tmp_path / "class", pkg_mc=99_500)
    log = tmp_path / "run.jsonl"
    root = Path(__file__).resolve().parents[2]
    with ScriptedUpstream(Timing(first_s=0.02, chunks=5, gap_s=0.01)) as up:
        script = (f"mount --bind {tmp_path / 'class'} /sys/class && exec timeout -s KILL 100 "
                  f"{sys.executable} -m llmtop --engine ollama --host {up.url} --model timed "
                  f"run --json --prompt hi --log {log}")
        done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                              text=True, check=False, timeout=200, cwd=root,
                              env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode in (0, 1), done.stderr
    said = ("the CPU was at its thermal limit (thermal_zone1 x86_pkg_temp: 99.5 °C >= passive "
            "trip 95.0 °C) during the request")
    found = [f for f in json.loads(done.stdout)["findings"] if f["code"] == "throttled"]
    assert [(f["level"], f["message"]) for f in found] == [("warn", said)]
    (request,) = read_log(log).requests
    assert request.machine is not None and [t.device for t in request.machine.throttle] == [
        "thermal_zone1 x86_pkg_temp"]


def test_a_hot_package_on_every_cores_sensor_is_said_once() -> None:
    from llmtop.sessions.analysis.machine import throttle_finding
    from llmtop.sessions.records.request import ThrottleRecord

    cores = [ThrottleRecord("CPU", "thermal", "hwmon", f"hwmon1 coretemp Core {i}",
                            "100.0 °C >= max 100.0 °C") for i in range(4)]
    f = throttle_finding((ThrottleRecord(**PKG_HOT), *cores))
    assert f is not None and f.value == 5.0  # 1 zone + 4 core sensors
    assert f.message == ("the CPU was at its thermal limit (thermal_zone1 x86_pkg_temp: "
                         "97.0 °C >= passive trip 95.0 °C; 4 more sensors) during the request")


def test_an_amd_board_at_its_power_cap_is_power_capped(tmp_path: Path) -> None:
    # amdgpu's hwmon: power1_average 218,000,000 µW = 218 W against power1_cap 220 W:
    # 218 >= 0.97 × 220 = 213.4 W → capped; at 150 W it is not
    laptop(tmp_path)
    _write(tmp_path / "hwmon" / "hwmon4", {"power1_average": "218000000\n",
                                           "power1_cap": "220000000\n"})
    reader = ThermalReader(tmp_path / "none", tmp_path / "hwmon")
    assert reader.read() == (Throttle("GPU", "power", "hwmon", "hwmon4 amdgpu power1_average",
                                      "218.0 W >= 97% of power1_cap 220.0 W"),)
    _write(tmp_path / "hwmon" / "hwmon4", {"power1_average": "150000000\n"})
    assert reader.read() == ()


def test_hostile_files_are_no_throttle_and_never_block(tmp_path: Path) -> None:
    import os

    laptop(tmp_path)
    zone = tmp_path / "thermal" / "thermal_zone1"
    (zone / "temp").unlink()
    os.mkfifo(zone / "temp")  # a FIFO would block a plain open(): refused, not read
    _write(tmp_path / "hwmon" / "hwmon1", {"temp1_input": "9" * 40 + "\n"})  # not a number
    _write(tmp_path / "thermal" / "thermal_zone0", {"trip_point_1_temp": "-5000\n"})
    reader = ThermalReader(tmp_path / "thermal", tmp_path / "hwmon")
    assert reader.read() == ()
    # acpitz's only counted trip is now below 0 °C: not a limit, so the zone is not watched
    assert [z.device for z in find_zones(tmp_path / "thermal")] == [
        "thermal_zone1 x86_pkg_temp"]
