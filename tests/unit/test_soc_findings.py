"""Heat or a neighbour on a system on chip (sessions/analysis/soc.py): the thermal-pressure
finding with its share of requests, and the memory-bandwidth contender (the seed's browser:
decode slower while the DRAM rail drew more, thermal pressure nominal), on constructed traces
whose figures are worked by hand in each test; the probe records as the session log carries
Apple Silicon's samples (probes/apple.py: GPU device thermal_state and rails_w)."""

from __future__ import annotations

import json

from llmtop.sessions.analysis.soc import (
    contender_finding,
    soc_findings,
    thermal_pressure_finding,
)
from llmtop.sessions.measure.timeline import RequestMetrics
from llmtop.sessions.records.base import parse
from llmtop.sessions.records.request import RequestRecord
from llmtop.sessions.records.schema import (
    AppCpu,
    GpuDeviceRecord,
    GpuRecord,
    ProbeRecord,
    ProcessesRecord,
)

ENGINE = "measured engine"


def sample(request_id: int, thermal: str | None = "nominal", dram_w: float | None = 2.0,
           browser_cpu: float = 0.0) -> ProbeRecord:
    """One Apple probe sample during `request_id`: Ollama at 95 % of a core, Chromium at
    `browser_cpu`, the GPU device's thermal state and DRAM rail."""
    rails = None if dram_w is None else {"cpu": 6.0, "gpu": 12.0, "dram": dram_w}
    device = GpuDeviceRecord(name=None, util_percent=90.0, vendor="Apple", source="apple",
                             thermal_state=thermal, rails_w=rails)
    apps = (AppCpu("Ollama", ENGINE, 95.0), AppCpu("Chromium", "browser", browser_cpu),
            AppCpu("llmtop", "llmtop", 30.0))
    return ProbeRecord(request_id=request_id, t_ns=0, processes=ProcessesRecord(False, apps),
                       gpu=GpuRecord(True, None, (device,)))


def request(i: int, decode: float) -> RequestRecord:
    return RequestRecord(id=i, status="ok",  # type: ignore[arg-type]
                         metrics=RequestMetrics(server_decode_tps=decode))


def by_id(samples: list[ProbeRecord]) -> dict[int, list[ProbeRecord]]:
    out: dict[int, list[ProbeRecord]] = {}
    for s in samples:
        assert s.request_id is not None
        out.setdefault(s.request_id, []).append(s)
    return out


def test_thermal_pressure_names_the_worst_state_and_the_share_of_requests() -> None:
    # request 1 nominal; 2 nominal then fair; 3 serious; 4 serious then critical; 5 nominal;
    # 6 has no reading. Five read, three above nominal (2 fair, 3 serious, 4 critical):
    # 3 / 5 = 60 %; the worst is critical → fail
    samples = by_id([sample(1), sample(2), sample(2, "fair"), sample(3, "serious"),
                     sample(4, "serious"), sample(4, "critical"), sample(5),
                     sample(6, thermal=None)])
    f = thermal_pressure_finding([1, 2, 3, 4, 5, 6], samples)
    assert f is not None
    assert (f.code, f.level, f.value, f.unit) == ("thermal-pressure", "fail", 60.0,
                                                   "% of requests")
    assert f.message == ("thermal pressure reached critical during 3 of 5 measured requests "
                         "(60 %; fair 1, serious 1, critical 1) (1 without a reading)")
    assert "cool" in f.remedy


def test_fair_alone_is_a_warning_and_nominal_or_unread_is_nothing() -> None:
    # 1 of 4 requests fair: 25 %, a warning
    fair = thermal_pressure_finding([1, 2, 3, 4], by_id(
        [sample(1), sample(2, "fair"), sample(3), sample(4)]))
    assert fair is not None and (fair.level, fair.value) == ("warn", 25.0)
    assert thermal_pressure_finding([1, 2], by_id([sample(1), sample(2)])) is None
    # no thermal reading at all (Linux, NVIDIA): absent, never "nominal"
    assert thermal_pressure_finding([1, 2], by_id([sample(1, None), sample(2, None)])) is None


def seed_trace() -> tuple[list[RequestRecord], list[ProbeRecord]]:
    """Eight decode requests on a Mac mini M4, thermal pressure nominal throughout: 1-4 with
    the browser idle (decode 42.0, 41.0, 43.0, 42.0 tok/s; DRAM 2.0, 2.1, 1.9, 2.0 W), 5-8
    with Chromium at 60 % of a core (decode 29.0, 28.5, 29.5, 29.0; DRAM 3.1, 3.0, 3.2, 3.1)."""
    quiet = [(42.0, 2.0), (41.0, 2.1), (43.0, 1.9), (42.0, 2.0)]
    busy = [(29.0, 3.1), (28.5, 3.0), (29.5, 3.2), (29.0, 3.1)]
    records, samples = [], []
    for i, (decode, dram) in enumerate(quiet + busy, start=1):
        records.append(request(i, decode))
        samples.append(sample(i, dram_w=dram, browser_cpu=60.0 if i > 4 else 0.5))
    return records, samples


def test_the_seeds_browser_is_named_with_its_figures_and_the_decode_drop() -> None:
    records, samples = seed_trace()
    f = contender_finding(records, by_id(samples))
    assert f is not None
    # decode medians: without 42.0 (41, 42, 42, 43), with 29.0 (28.5, 29, 29, 29.5):
    # 1 − 29.0 / 42.0 = 0.3095 → 31 %. DRAM medians: 2.0 W (1.9, 2.0, 2.0, 2.1) and
    # 3.1 W (3.0, 3.1, 3.1, 3.2): 3.1 / 2.0 − 1 = 0.55 → 55 %
    assert (f.code, f.level, f.value, f.threshold, f.unit) == (
        "memory-bandwidth-contender", "warn", 31.0, 10.0, "% decode drop")
    assert f.message == (
        "Chromium (60 % of a core) was active during 4 of 8 measured requests: decode ran "
        "31 % slower (42.0 → 29.0 tok/s) while the DRAM rail drew 55 % more (2.00 → 3.10 W); "
        "thermal pressure stayed nominal: it shares the memory bandwidth decode reads its "
        "weights through")
    assert f.remedy.startswith("close or pause Chromium while measuring")


def test_no_contender_without_a_dram_reading_or_without_a_rise() -> None:
    records, samples = seed_trace()
    unread = [sample(s.request_id or 0, dram_w=None, browser_cpu=60.0 if (s.request_id or 0) > 4
                     else 0.5) for s in samples]
    assert contender_finding(records, by_id(unread)) is None  # the attribution's to name
    # DRAM flat at 2.0 W while decode fell: not the memory (heat or compute), no contender
    flat = [sample(s.request_id or 0, dram_w=2.0, browser_cpu=60.0 if (s.request_id or 0) > 4
                   else 0.5) for s in samples]
    assert contender_finding(records, by_id(flat)) is None
    # the engine's and llmtop's own CPU never make them contenders
    assert all("Ollama" not in f.message and "llmtop (" not in f.message
               for f in soc_findings(records, samples))


def test_both_findings_from_logged_probe_lines() -> None:
    # the probe lines as the session log writes them (GpuDevice's thermal_state and rails_w)
    records, samples = seed_trace()
    logged = [parse(ProbeRecord, "probe", {
        "type": "probe", "request_id": s.request_id, "t_ns": 0,
        "processes": {"warming_up": False, "apps": [
            {"app": a.app, "category": a.category, "cpu_percent": a.cpu_percent}
            for a in (s.processes.apps if s.processes else ())]},
        "gpu": {"available": True, "devices": [{
            "vendor": "Apple", "source": "apple", "util_percent": 90.0,
            "thermal_state": "serious" if s.request_id == 8 else "nominal",
            "rails_w": s.gpu.devices[0].rails_w if s.gpu else None}]}}) for s in samples]
    found = soc_findings(records, logged)
    assert [f.code for f in found] == ["thermal-pressure", "memory-bandwidth-contender"]
    # 1 of 8 requests serious: 12.5 %; the browser's requests reached serious (request 8)
    assert found[0].value == 12.5 and found[0].level == "fail"
    assert "thermal pressure reached serious too" in found[1].message


def test_a_bench_report_says_both_in_markdown_and_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # the seed trace written as a bench log (compare_logs.write_log: server decode from
    # eval_duration) after its warm-up (id 1), so the trace's request i is the log's i + 1;
    # the last one's sample reads serious
    from llmtop.sessions.records.log import read_log
    from llmtop.sessions.reports.formats import render
    from llmtop.sessions.reports.run import build
    from tests.unit.compare_logs import write_log

    _, samples = seed_trace()
    probes = [{"request_id": (s.request_id or 0) + 1, "t_ns": 0, "processes": {
        "warming_up": False, "apps": [{"app": a.app, "category": a.category,
                                       "cpu_percent": a.cpu_percent}
                                      for a in (s.processes.apps if s.processes else ())]},
        "gpu": {"available": True, "devices": [{
            "vendor": "Apple", "source": "apple",
            "thermal_state": "serious" if s.request_id == 8 else "nominal",
            "rails_w": s.gpu.devices[0].rails_w if s.gpu else None}]}} for s in samples]
    path = write_log(tmp_path / "b.jsonl", [100.0] * 8,
                     [42.0, 41.0, 43.0, 42.0, 29.0, 28.5, 29.5, 29.0], probes=probes)
    report = build(read_log(path))
    assert [f.code for f in report.soc] == ["thermal-pressure", "memory-bandwidth-contender"]
    text = render(report, "md")
    assert "## Heat and memory contention" in text
    assert "thermal pressure reached serious during 1 of 8 measured requests (12 %" in text
    assert "decode ran 31 % slower (42.0 → 29.0 tok/s)" in text
    data = json.loads(render(report, "json"))
    assert [f["code"] for f in data["soc_findings"]] == [
        "thermal-pressure", "memory-bandwidth-contender"]
    assert "Heat and memory contention" in render(report, "html")  # the page carries it
