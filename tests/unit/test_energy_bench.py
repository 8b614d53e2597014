"""Energy through a whole bench (issue 26's done-when): the slotted scripted engine
(llmtop/testing/slotted.py) and a fake RAPL powercap tree whose counter is computed from the
perf clock at each read: 15 W × the time since the tree was made, so the joules in any window
[a, b] are exactly 15 × (b − a) s, whatever the machine's speed. The expected figures are
therefore computed from the request records' own stamps, by hand, beside each assertion.
"""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

from llmtop.connect import connect
from llmtop.engines.events import Status
from llmtop.probes.energy import discover_sources
from llmtop.probes.energy.rapl import read_text
from llmtop.sessions.measure.config import BenchConfig
from llmtop.sessions.records.schema import EnergyRecord, RunLog
from llmtop.sessions.reports.formats import render
from llmtop.sessions.reports.run import build
from llmtop.sessions.runners.bench import BenchRunner
from llmtop.sessions.runners.energy import EnergyMeter
from llmtop.testing.slotted import MODEL, TEMPLATE_TOKENS, Service, SlottedUpstream

WATTS = 15
MAX_RANGE = 262143328850  # a real package's max_energy_range_uj
# prefill 200 ms: long enough that the few ms between the edge samples and the send / first
# token stamps on a loaded runner stay under the coarse rule's 10 % (probes/energy/window.py)
SERVICE = Service(slots=1, prefill_s=0.2, tokens=9, gap_s=0.02)


class NoGpu:
    """pynvml's surface with no GPU: the NVML family is absent."""

    class NVMLError(Exception):
        pass

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 0


def fifteen_watt_tree(root: Path) -> Any:
    """A powercap tree with one package zone; its energy_uj read as 15 W × elapsed: µJ =
    W × ns / 1000. Returns the file reader the sources use."""
    zone = root / "intel-rapl:0"
    zone.mkdir(parents=True)
    (zone / "name").write_text("package-0\n")
    (zone / "max_energy_range_uj").write_text(f"{MAX_RANGE}\n")
    (zone / "energy_uj").write_text("0\n")
    t0 = time.perf_counter_ns()

    def read(path: Path) -> str:
        if path.name == "energy_uj":
            return str(WATTS * (time.perf_counter_ns() - t0) // 1000)
        return read_text(path)

    return read


def meter(tmp_path: Path) -> EnergyMeter:
    read = fifteen_watt_tree(tmp_path / "powercap")
    found = discover_sources(
        tmp_path / "powercap", tmp_path / "ps", nvml_lib=NoGpu(), platform="linux", read=read
    )
    return EnergyMeter(found)


@pytest.fixture(scope="module")
def bench_log(tmp_path_factory: pytest.TempPathFactory) -> RunLog:
    import asyncio

    tmp = tmp_path_factory.mktemp("energy")

    async def run() -> RunLog:
        with SlottedUpstream(SERVICE) as up:
            conn = await connect("ollama", up.url, MODEL)
            try:
                cfg = BenchConfig(
                    requests=4,
                    warmup=1,
                    prompt_tokens=(40,),
                    max_tokens=9,
                    num_ctx=2048,
                    use_cache=False,
                    preflight_s=0.3,
                )
                runner = BenchRunner(conn, cfg, str(tmp / "bench.jsonl"), energy=meter(tmp))
                return (await runner.run()).log
            finally:
                await conn.close()

    return asyncio.run(run())


def energy(log: RunLog, scope: str) -> list[EnergyRecord]:
    return [e for e in log.energy if e.scope == scope]


def test_the_sources_line_names_the_fake_package(bench_log: RunLog) -> None:
    (sources,) = energy(bench_log, "sources")
    assert sources.readable and sources.line == "energy: rapl:package-0 (CPU package 0)"


def test_fifteen_watts_is_fifteen_joules_per_second(bench_log: RunLog) -> None:
    (idle,) = energy(bench_log, "idle")  # preflight's window, 0.3 s of it at least
    assert idle.source == "rapl:cpu" and (idle.duration_s or 0) >= 0.3
    assert idle.mean_power_w == pytest.approx(WATTS, rel=0.01)
    (run,) = energy(bench_log, "run")
    assert run.mean_power_w == pytest.approx(WATTS, rel=0.01)
    assert run.energy_j == pytest.approx(WATTS * (run.duration_s or 0), rel=0.01)
    for r in energy(bench_log, "request"):
        assert r.mean_power_w == pytest.approx(WATTS, rel=0.01)


def test_j_per_token_is_the_hand_computation_from_the_stamps(bench_log: RunLog) -> None:
    by_id = {r.id: r for r in bench_log.requests}
    measured = [e for e in energy(bench_log, "request") if by_id[e.request_id or 0].measured]
    assert len(measured) == 4
    for e in measured:
        req = by_id[e.request_id or 0]
        offsets = [c[0] for c in req.chunks]
        ttft_s, e2e_s = offsets[0] / 1e9, offsets[-1] / 1e9
        # The slotted server: 40 calibrated prompt tokens (words + TEMPLATE_TOKENS), 9 output
        # tokens, the first after 200 ms of "prefill", then 8 more 20 ms apart; the client's
        # stamps say when each arrived. With E = 15 W × t:
        #   prefill J = 15 × TTFT s               (≈ 15 × 0.200 = 3.0 J)
        #   decode  J = 15 × (E2E − TTFT) s       (≈ 15 × 0.160 = 2.4 J)
        #   J/output token = decode J / 9          (≈ 0.267 J)
        #   J/prompt token = prefill J / 40        (≈ 0.075 J)
        assert (e.prompt_tokens, e.output_tokens) == (req.stats.prompt_eval_count, 9)
        assert e.prompt_tokens is not None and e.prompt_tokens >= TEMPLATE_TOKENS
        assert e.prefill_j == pytest.approx(WATTS * ttft_s, rel=0.01)
        assert e.decode_j == pytest.approx(WATTS * (e2e_s - ttft_s), rel=0.01)
        assert e.output_j_per_token == pytest.approx(WATTS * (e2e_s - ttft_s) / 9, rel=0.01)
        assert e.prompt_j_per_token == pytest.approx(WATTS * ttft_s / e.prompt_tokens, rel=0.01)
        assert e.energy_j == pytest.approx(WATTS * e2e_s, rel=0.01)
        # idle is 15 W too, so nothing is above it: |above idle| under 1 % of the total
        assert abs(e.energy_above_idle_j or 0) < 0.01 * (e.energy_j or 0)
        assert not e.coarse, e.reason


def test_the_run_figure_is_all_in_energy_over_every_output_token(bench_log: RunLog) -> None:
    (run,) = energy(bench_log, "run")
    # the measured requests' own windows, send → last chunk, summed (the canary between
    # them left out): seconds = Σ E2E of the 4 measured requests, from their records;
    # 4 × 9 output tokens = 36; J/token = 15 W × seconds / 36
    seconds = sum(r.chunks[-1][0] / 1e9 for r in bench_log.requests if r.phase == "measure")
    assert (run.requests, run.output_tokens) == (4, 36)
    assert run.duration_s == pytest.approx(seconds, rel=0.01)
    assert run.output_j_per_token == pytest.approx(WATTS * seconds / 36, rel=0.01)


def test_every_energy_record_reads_back_as_written(bench_log: RunLog) -> None:
    assert bench_log.energy and not bench_log.warnings
    for e in bench_log.energy:
        assert EnergyRecord.from_json(e.to_json()) == e


def test_the_reports_give_the_figures(bench_log: RunLog) -> None:
    report = build(bench_log)
    (run,) = energy(bench_log, "run")
    md = render(report, "md")
    section = md[md.index("## Energy") :].split("\n## ", 1)[0]
    assert "energy: rapl:package-0 (CPU package 0)" in section
    row = next(line for line in section.splitlines() if line.startswith("| rapl:cpu"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "15 W" and cells[2] == "4"  # idle power (3 digits), 4 measured requests
    assert cells[8].startswith(f"{run.output_j_per_token:.3g} J (")  # the run's all-in figure
    assert "<h2>Energy</h2>" in render(report, "html")  # the page carries the section
    data = json.loads(render(report, "json"))["energy"]
    (src,) = data["sources"]
    per = src["per_request"]["output_j_per_token"]
    values = sorted(
        e.output_j_per_token or 0
        for e in energy(bench_log, "request")
        if e.request_id in {r.id for r in bench_log.requests if r.measured}
    )
    assert per["n"] == 4 and per["median"] == pytest.approx((values[1] + values[2]) / 2)
    rows = list(csv.DictReader(io.StringIO(render(report, "csv"))))
    by_id = {e.request_id: e for e in energy(bench_log, "request")}
    sized = [r for r in bench_log.requests if r.phase != "load"]  # the warm-up, 4 measured
    for row_, req in zip(rows, sized, strict=True):
        assert float(row_["output_j_per_token[rapl:cpu]"]) == pytest.approx(
            by_id[req.id].output_j_per_token
        )


def test_without_a_source_the_report_says_na_once_and_csv_is_unchanged(tmp_path: Path) -> None:
    found = discover_sources(tmp_path / "none", tmp_path / "ps", nvml_lib=NoGpu(), platform="linux")
    meter_ = EnergyMeter(found)
    assert meter_.line.startswith("energy: n/a — no readable source (")
    # no source: nothing is read and no figure is made
    assert not meter_.active and meter_.measure_idle(0, 10**9) == []
    assert meter_.span("run", 0, 10**9, []) == []
    record = meter_.sources_record()
    log = RunLog.from_json(
        {"type": "header", "format": 1, "kind": "bench", "model": "m", "engine": "e"},
        [record.to_json()],
    )
    md = render(build(log), "md")
    section = md[md.index("## Energy") :].split("\n## ", 1)[0]
    assert section.strip().splitlines()[-1] == meter_.line
    assert md.count("energy: n/a") == 1
    assert "[" not in render(build(log), "csv").splitlines()[0]  # no energy columns


def test_load_gives_j_per_token_per_concurrency_level(tmp_path: Path) -> None:
    import asyncio

    from llmtop.sessions.analysis.load import analyze_sweep
    from llmtop.sessions.measure.config import LoadConfig
    from llmtop.sessions.records.log import read_log
    from llmtop.sessions.runners.load.runner import LoadRunner

    async def run() -> str:
        with SlottedUpstream(Service(slots=2, prefill_s=0.02, tokens=9, gap_s=0.01)) as up:
            conn = await connect("ollama", up.url, MODEL)
            try:
                cfg = LoadConfig(
                    levels=(1, 2),
                    requests=4,
                    prompt_tokens=30,
                    max_tokens=9,
                    num_ctx=2048,
                    use_cache=False,
                    preflight_s=0.2,
                )
                runner = LoadRunner(conn, cfg, str(tmp_path / "load.jsonl"), energy=meter(tmp_path))
                return (await runner.run()).log_path
            finally:
                await conn.close()

    log = read_log(asyncio.run(run()))
    assert not energy(log, "request")  # concurrent requests share the machine: per level only
    levels = energy(log, "level")
    assert [e.level for e in levels] == [0, 1]
    for e in levels:
        # each level: 4 ok requests × 9 output tokens = 36; J = 15 W × the level's seconds
        assert (e.requests, e.output_tokens) == (4, 36)
        assert e.mean_power_w == pytest.approx(WATTS, rel=0.01)
        assert e.output_j_per_token == pytest.approx(WATTS * (e.duration_s or 0) / 36, rel=0.01)
    md = render(analyze_sweep(log), "md")
    section = md[md.index("## Energy") :].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| rapl:cpu")]
    assert [r.split("|")[2].strip() for r in rows] == ["1 user", "2 users"]
    assert f"{levels[1].output_j_per_token:.3g} J" in rows[1]
    header = render(analyze_sweep(log), "csv").splitlines()[0]
    assert "output_j_per_token[rapl:cpu]" in header
    page = render(analyze_sweep(log), "html")  # the markdown's section, as a page
    assert "<h2>Energy</h2>" in page and "rapl:cpu (CPU package 0)" in page


def test_a_coarse_source_reports_the_run_figure_and_says_why(tmp_path: Path) -> None:
    # A battery gauge: every request's window coarse. The run: 120 J over 60 s (2 W) for
    # 3 requests × 100 output tokens = 300 tokens → 120 / 300 = 0.4 J per output token.
    header = {"type": "header", "format": 1, "kind": "bench", "model": "m", "engine": "e"}
    records: list[dict[str, Any]] = [
        EnergyRecord("sources", line="energy: battery:BAT0 (whole machine, coarse)").to_json()
    ]
    for i in (1, 2, 3):
        records.append(
            {
                "type": "request",
                "id": i,
                "status": "ok",
                "phase": "measure",
                "index": i - 1,
                "prompt_tokens_target": 64,
            }
        )
        records.append(
            EnergyRecord(
                "request",
                "battery:BAT0",
                "whole machine",
                request_id=i,
                energy_j=0.0,
                output_tokens=100,
                coarse=True,
                reason="too coarse for one request: aggregate over the run "
                "(the gauge changed fewer than twice)",
            ).to_json()
        )
    records.append(
        EnergyRecord(
            "run",
            "battery:BAT0",
            "whole machine",
            duration_s=60.0,
            energy_j=120.0,
            mean_power_w=2.0,
            output_tokens=300,
            requests=3,
            output_j_per_token=0.4,
        ).to_json()
    )
    md = render(build(RunLog.from_json(header, records)), "md")
    row = next(line for line in md.splitlines() if line.startswith("| battery:BAT0"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "0" and cells[5] == "n/a"  # no request counts; no per-request median
    assert cells[8] == "0.4 J (120 J over 60.00 s, 2 W)"
    assert cells[9].startswith(
        "per-request windows too coarse (too coarse for one request: "
        "aggregate over the run (the gauge changed fewer than twice))"
        ": aggregated over the run"
    )


def test_stamps_out_of_order_give_no_figure_and_never_fail_the_request(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from llmtop.engines.events import StreamEvent
    from llmtop.sessions.measure.request import RequestResult
    from llmtop.sessions.measure.timeline import RequestMetrics

    m = meter(tmp_path)
    t = m.sample()
    # a first chunk stamped before the send (a clock that jumped): no window can be made
    result = RequestResult(
        request_id=7,
        wall_start="",
        model="m",
        prompt="p",
        options={},
        sent_ns=t + 5_000,
        events=(StreamEvent(t_ns=t + 1_000, content="x"), StreamEvent(t_ns=t + 9_000, done=True)),
        stats=None,
        status=Status.OK,
        failure=None,
        metrics=RequestMetrics(),
    )
    m.sample("end")
    assert m.request(result) == []
    assert "request 7: no energy figure: stamps must satisfy send ≤ first token" in caplog.text
