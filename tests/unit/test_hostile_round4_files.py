"""Files llmtop reads, at their extremes: session logs with numbers no measurement can be,
config files that block, nest or overflow, sysfs energy files that block or lie, a
llama-server's /props with NaN, and a home folder llmtop cannot write (docs/hostile-input.md,
"Files llmtop reads, at their extremes")."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from llmtop.engines.llama_props import config_from, describe
from llmtop.probes import config as probe_config
from llmtop.probes.config import ConfigError, load_engine_pids, load_thresholds
from llmtop.probes.energy.battery import BatterySource, discover_batteries
from llmtop.probes.energy.model import EnergySample, Kind, Role, SourceInfo
from llmtop.probes.energy.rapl import discover_rapl
from llmtop.probes.energy.window import MAX_SOURCE_POWER_W, segment_joules, window_energy
from llmtop.sessions.records.log import SessionLog, read_log
from llmtop.sessions.records.schema import Header

HEADER = {"type": "header", "format": 1, "kind": "session"}
CLI_TIMEOUT_S = 120


def request(rid: int, **metrics: object) -> dict:
    """A request record with the given metrics (ms), ok."""
    return {"type": "request", "id": rid, "status": "ok", "metrics": metrics}


def good(rid: int) -> dict:
    return request(rid, ttft_ms=100.0 + rid, e2e_ms=1000.0 + rid, tpot_ms=10.0,
                   output_tokens=90, itl_ms=[10.0, 11.0])


def write_log(path: Path, *lines: dict | str) -> Path:
    text = [json.dumps(HEADER)] + [x if isinstance(x, str) else json.dumps(x) for x in lines]
    path.write_text("\n".join(text) + "\n")
    return path


def llmtop(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llmtop", *argv], capture_output=True,
                          text=True, check=False, timeout=CLI_TIMEOUT_S,
                          env={**os.environ, **(env or {})})


# --- session logs ------------------------------------------------------------------------


def test_extreme_numbers_cost_their_line_and_name_the_field(tmp_path: Path) -> None:
    huge = "9" * 5000  # past Python's 4,300-digit int conversion limit
    path = write_log(
        tmp_path / "s.jsonl",
        good(1),
        request(2, ttft_ms=1e308, e2e_ms=1e308, tpot_ms=1e308),
        request(3, ttft_ms=-1e308, e2e_ms=-1e308),
        '{"type": "request", "id": 4, "status": "ok", "metrics": {"ttft_ms": 1e400}}',
        '{"type": "request", "id": 5, "status": "ok", "metrics": {"output_tokens": '
        + huge + "}}",
        '{"type": "request", "id": 6, "status": "ok", "metrics": {"e2e_ms": NaN}}',
        good(7),
    )
    log = read_log(path)
    assert [r.id for r in log.requests] == [1, 7]
    # each warning names its line and the first bad field in file order; 2^64 = 1.84e19
    assert log.warnings[0] == ("line 3: request record: field metrics.ttft_ms: holds 1e+308, "
                               "past 1.84e+19, which no measurement can be; skipped")
    assert log.warnings[1] == ("line 4: request record: field metrics.ttft_ms: holds -1e+308, "
                               "past 1.84e+19, which no measurement can be; skipped")
    assert log.warnings[2] == ("line 5: request record: field metrics.ttft_ms: holds a number "
                               "past a float's range (read as infinity), which no measurement "
                               "can be; skipped")
    assert log.warnings[3] == ("line 6: request record: field metrics.output_tokens: holds an "
                               "integer of 5000 digits, which no measurement can be; skipped")
    assert log.warnings[4] == ("line 7: request record: field metrics.e2e_ms: holds NaN, which "
                               "no measurement can be; skipped")
    assert len(log.warnings) == 5


def test_report_and_compare_read_the_rest_of_a_log_with_extreme_numbers(tmp_path: Path) -> None:
    # before: report exited 2 ("cannot convert float NaN to integer") and compare printed a
    # traceback (the int-digits ValueError); now each bad line is named and skipped
    bad = write_log(tmp_path / "bad.jsonl", good(1), good(2),
                    request(3, ttft_ms=1e308, e2e_ms=1e308, tpot_ms=1e308),
                    request(4, ttft_ms=-1e308, e2e_ms=-1e308, tpot_ms=-1e308),
                    '{"type": "request", "id": 5, "status": "ok", "metrics": {"output_tokens": '
                    + "7" * 5000 + "}}", good(6))
    other = write_log(tmp_path / "other.jsonl", good(1), good(2), good(3))
    report = llmtop("report", str(bad))
    assert report.returncode == 0, report.stderr
    assert "Traceback" not in report.stderr
    for line in (4, 5, 6):
        assert f"{bad}: line {line}: request record: field metrics." in report.stderr
    compare = llmtop("compare", str(bad), str(other))
    assert "Traceback" not in compare.stderr, compare.stderr
    assert compare.returncode in (0, 1), compare.stderr
    assert "line 6: request record: field metrics.output_tokens: holds an integer of 5000 " \
           "digits" in compare.stderr


def test_negative_and_contradictory_durations_are_set_aside(tmp_path: Path) -> None:
    path = write_log(
        tmp_path / "s.jsonl",
        good(1),
        request(2, ttft_ms=-5.0, e2e_ms=10.0),
        request(3, ttft_ms=5.0, e2e_ms=10.0, itl_ms=[-3.0, -1e9]),
        {**request(4, ttft_ms=5.0, e2e_ms=10.0), "stats": {"eval_count": -5}},
        request(5, ttft_ms=5000.0, e2e_ms=10.0),
        request(6, ttft_ms=5.0, e2e_ms=4e10),  # 4e10 ms: 463 days
        request(7, ttft_ms=5.0, e2e_ms=10.0, overhead_ms=-2.0),  # a server's over-report
    )
    log = read_log(path)
    assert [r.id for r in log.requests] == [1, 7]
    assert log.warnings == (
        ("line 3: request record: field metrics.ttft_ms: -5 ms is negative, which no duration "
        "can be; skipped"),
        ("line 4: request record: field metrics.itl_ms[0]: -3 ms is negative, which no "
        "duration can be; skipped"),
        ("line 5: request record: field stats.eval_count: -5 is negative, which no count or "
        "duration can be; skipped"),
        ("line 6: request record: field metrics.e2e_ms: 10 ms ends before the first token "
        "(ttft_ms 5000): a request ends after it begins; skipped"),
        ("line 7: request record: field metrics.e2e_ms: 4e+10 ms is over a year (3.16e+10 ms), "
        "which no request lasts; skipped"),
    )


# --- the config file ---------------------------------------------------------------------


def _in_child(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`code` in a new interpreter, killed after 30 s: a reader that blocks fails the test
    instead of hanging it."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=30, env={**os.environ, **env})


LOAD = ("from llmtop.probes.config import ConfigError, load_thresholds\n"
        "try:\n    load_thresholds()\nexcept ConfigError as exc:\n    print(exc)\n")


@pytest.mark.parametrize(("make", "what"), [
    (lambda p: os.mkfifo(p), "a FIFO (named pipe)"),
    (lambda p: p.symlink_to("/dev/zero"), "a device"),
    (lambda p: p.symlink_to("/dev/urandom"), "a device"),
])
def test_a_config_that_would_block_is_refused_at_once(tmp_path: Path, make, what) -> None:
    cfg = tmp_path / "config.toml"
    make(cfg)
    done = _in_child(LOAD, {"LLMTOP_CONFIG": str(cfg)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (f"config file {cfg} is {what}, not a file: give the path of "
                                   "a TOML file")


@pytest.mark.parametrize("body", [
    "[thresholds]\nbackground_cpu_warn = " + "[" * 100_000 + "]" * 100_000 + "\n",
    "x = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n",
])
def test_config_nested_too_deep_is_a_config_error(tmp_path: Path, body: str) -> None:
    cfg = tmp_path / "deep.toml"
    cfg.write_text(body)
    with pytest.raises(ConfigError) as err:
        load_thresholds(cfg)
    assert str(err.value) == (f"config file {cfg}: arrays or tables nested too deep to read "
                              "(over about 900 levels); a config of thresholds nests two")


def test_config_deep_nesting_through_preflight_exits_2_without_traceback(tmp_path) -> None:
    cfg = tmp_path / "deep.toml"
    cfg.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    done = llmtop("--engine", "ollama", "--host", "http://127.0.0.1:9", "--model", "ok",
                  "preflight", "--duration", "0.5", env={"LLMTOP_CONFIG": str(cfg)})
    assert done.returncode == 2
    assert done.stderr == (f"llmtop preflight: config error: config file {cfg}: arrays or "
                           "tables nested too deep to read (over about 900 levels); a config "
                           "of thresholds nests two\n")


def test_config_pids_past_the_systems_largest_are_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(probe_config, "PID_LIMIT", 1 << 22)  # Linux's PID_MAX_LIMIT
    cfg = tmp_path / "pids.toml"
    cfg.write_text(f"[engine]\npids = [900, {2**70}]\n")  # 2^70 overflowed psutil's C long
    with pytest.raises(ConfigError) as err:
        load_engine_pids(cfg)
    assert str(err.value) == (f"{cfg}: [engine] pids: 1180591620717411303424 is not a process "
                              "id (the largest this system allows is 4194304); give the "
                              "engine's pids from `ps`")
    cfg.write_text("[engine]\npids = [4194304]\n")  # the limit itself is a pid
    assert load_engine_pids(cfg) == (4194304,)
    cfg.write_text("[engine]\npids = [4194305]\n")
    with pytest.raises(ConfigError):
        load_engine_pids(cfg)


def test_engine_pid_flag_past_the_systems_largest_is_refused() -> None:
    from argparse import ArgumentTypeError

    from llmtop.commands.flags import pid_number

    limit = probe_config.PID_LIMIT
    assert pid_number(str(limit)) == limit
    for text in (str(limit + 1), str(2**70), "9" * 5000):
        with pytest.raises(ArgumentTypeError) as err:
            pid_number(text)
        assert str(err.value) == f"pid {text[:40]!r} is not a whole number from 1 to {limit}"


def test_config_with_a_byte_order_mark_reads(tmp_path: Path) -> None:
    cfg = tmp_path / "bom.toml"
    cfg.write_bytes(b"\xef\xbb\xbf[thresholds]\nbackground_cpu_warn = 15\n")  # Notepad's way
    assert load_thresholds(cfg).background_cpu_warn == 15.0


def test_config_over_its_size_bound_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "big.toml"
    cfg.write_bytes(b"#" * probe_config.MAX_CONFIG_BYTES + b"\n")  # one byte over 1 MiB
    with pytest.raises(ConfigError) as err:
        load_thresholds(cfg)
    assert str(err.value) == (f"config file {cfg} is longer than 1048576 bytes (1 MiB): a "
                              "config of thresholds is a few lines; is it the right file?")


# --- sysfs energy ------------------------------------------------------------------------


def _zone(root: Path, energy: str | None, wrap: str = "262143328850",
          name: str = "package-0") -> Path:
    zone = root / "powercap" / "intel-rapl:0"
    zone.mkdir(parents=True)
    (zone / "name").write_text(name + "\n")
    (zone / "max_energy_range_uj").write_text(wrap + "\n")
    if energy is None:
        os.mkfifo(zone / "energy_uj")
    else:
        (zone / "energy_uj").write_text(energy + "\n")
    return zone


def test_a_fifo_energy_counter_is_not_a_source_and_does_not_block(tmp_path: Path) -> None:
    _zone(tmp_path, None)
    found: list = []
    worker = threading.Thread(target=lambda: found.extend(discover_rapl(tmp_path / "powercap")),
                              daemon=True)  # a blocked open() would leave it stuck here
    worker.start()
    worker.join(20)
    assert not worker.is_alive(), "discover_rapl blocked on a FIFO"
    [source] = found
    energy = tmp_path / "powercap" / "intel-rapl:0" / "energy_uj"
    assert not source.info.readable
    assert source.info.reason == f"{energy} is a FIFO (named pipe), not a file: not a sysfs counter"


@pytest.mark.parametrize(("energy", "wrap", "why"), [
    ("-100", "262143328850", ("reads -100: an energy counter counts up from 0, so it is not a "
                             "source")),
    (str(2**64 + 5), "0", ("its max_energy_range_uj is 0: a counter's range is positive, so it "
                          "is not a source")),
    ("5", "-1", ("its max_energy_range_uj is -1: a counter's range is positive, so it is not a "
                "source")),
    ("300", "200", ("reads 300, past its max_energy_range_uj 200: the counter wraps to 0 there, "
                   "so it is not a source")),
])
def test_an_impossible_counter_is_not_a_source(tmp_path: Path, energy, wrap, why) -> None:
    _zone(tmp_path, energy, wrap)
    [source] = discover_rapl(tmp_path / "powercap")
    assert not source.info.readable
    assert source.info.reason == f"{tmp_path}/powercap/intel-rapl:0/energy_uj: {why}"


RAPL = SourceInfo("rapl:package-0", Kind.COUNTER, Role.PACKAGE, "uJ", 1e-6, "CPU package 0",
                  True, resolution_j=1e-6, update_period_s=0.001, wrap_range=262143328850)


def test_a_counter_running_backwards_is_not_read_as_wraps() -> None:
    # 1 J less every 5 ms, sampled each second: 200 J less per sample. Taken for a wrap each
    # time it was 262143.33 - 200 = 261943.33 J a second (262 kW); now set aside
    start = 200_000_000_000
    samples = [EnergySample(k * 10**9, start - k * 200_000_000) for k in range(4)]
    window = window_energy(RAPL, samples, 0, 3 * 10**9)
    assert window.joules is None
    assert window.reason == ("the counter fell by 200 J; read as a wrap, 2.62e+05 J in 1 s "
                             "would be 2.62e+05 W, more than any one source draws (10000 W): "
                             "a faulty reading, set aside")


def test_a_true_wrap_still_counts() -> None:
    # 100 J below the top, then 50 J past 0 a second later: 150 J in 1 s (150 W)
    a = EnergySample(0, 262143328850 - 100_000_000)
    b = EnergySample(10**9, 50_000_000)
    joules, why = segment_joules(RAPL, a, b)
    assert why == ""
    assert joules == pytest.approx(150.0)


def test_a_gpu_counter_jumping_to_megawatts_is_set_aside() -> None:
    gpu = SourceInfo("nvml:gpu0", Kind.COUNTER, Role.GPU, "mJ", 1e-3, "GPU 0 board", True,
                     resolution_j=1e-3)
    # 250 J in the first second (250 W), then 25e6 J in the next (25 MW)
    samples = [EnergySample(0, 1_000_000), EnergySample(10**9, 1_250_000),
               EnergySample(2 * 10**9, 1_250_000 + 25_000_000_000)]
    assert window_energy(gpu, samples, 0, 10**9).joules == pytest.approx(250.0)
    jumped = window_energy(gpu, samples, 0, 2 * 10**9)
    assert jumped.joules is None
    assert jumped.reason == ("2.5e+07 J in 1 s would be 2.5e+07 W, more than any one source "
                             f"draws ({MAX_SOURCE_POWER_W:.0f} W): a faulty reading, set aside")


def test_a_battery_reporting_negative_power_while_discharging_counts_its_size() -> None:
    files = {"status": "Discharging", "power_now": "-80000000"}  # -80 W, µW

    def read(path: Path) -> str:
        return files[path.name]

    info = SourceInfo("battery:BAT0", Kind.POWER, Role.BATTERY, "W", 1.0, "whole machine",
                      True, coarse=True)
    source = BatterySource(info, Path("/x/BAT0"), "power_now", read)
    assert source.read() == (80.0, None)
    samples = [EnergySample(0, 80.0), EnergySample(10**9, 80.0)]
    assert window_energy(info, samples, 0, 10**9).joules == pytest.approx(80.0)  # not -80 J
    negative = [EnergySample(0, -80.0), EnergySample(10**9, -80.0)]
    joules, why = segment_joules(info, *negative)
    assert joules is None
    assert why == "a power reading of -80 W: power drawn is not negative"


def test_a_battery_status_that_is_a_fifo_does_not_block(tmp_path: Path) -> None:
    bat = tmp_path / "BAT0"
    bat.mkdir()
    (bat / "type").write_text("Battery\n")
    (bat / "energy_now").write_text("50000000\n")
    os.mkfifo(bat / "status")
    found: list = []
    worker = threading.Thread(target=lambda: found.extend(discover_batteries(tmp_path)),
                              daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive(), "discover_batteries blocked on a FIFO"
    [source] = found
    assert not source.info.readable
    assert source.info.reason == (f"{bat}/status cannot be read ({bat}/status is a FIFO (named "
                                  "pipe), not a file)")


def _can_unshare() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    return probe.returncode == 0


needs_namespace = pytest.mark.skipif(not _can_unshare(),
                                     reason="needs root and unshare -m (a private mount)")


@needs_namespace
@pytest.mark.parametrize("family", ["rapl", "battery"])
def test_version_v_with_a_fifo_in_sysfs_ends(tmp_path: Path, family: str) -> None:
    # a fake /sys/class bound over the real one in a private mount namespace; the real CLI
    # under `timeout -s KILL` (a blocked open() ignores SIGTERM, so only KILL would end it)
    tree = tmp_path / "class"
    if family == "rapl":
        _zone(tree, None)
    else:
        bat = tree / "power_supply" / "BAT0"
        bat.mkdir(parents=True)
        (bat / "type").write_text("Battery\n")
        (bat / "energy_now").write_text("50000000\n")
        os.mkfifo(bat / "status")
    script = (f"mount --bind {tree} /sys/class && exec timeout -s KILL 40 "
              f"{sys.executable} -m llmtop --version -v")
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                          text=True, check=False, timeout=90)
    assert done.returncode == 0, (done.returncode, done.stderr)
    line = next(x for x in done.stdout.splitlines() if x.strip().startswith("energy "))
    if family == "rapl":
        assert ("rapl:package-0: /sys/class/powercap/intel-rapl:0/energy_uj is a FIFO (named "
                "pipe), not a file: not a sysfs counter") in line
    else:
        assert ("/sys/class/power_supply/BAT0/status cannot be read (/sys/class/power_supply/"
                "BAT0/status is a FIFO (named pipe), not a file)") in line


# --- llama-server's /props ---------------------------------------------------------------


def test_nan_and_infinity_in_props_are_set_aside_and_the_header_writes(tmp_path: Path) -> None:
    props = {"build_info": "b1-x", "total_slots": math.nan,
             "default_generation_settings": {"n_ctx": math.inf}}
    config = config_from(props, [{"id": 0, "n_ctx": math.nan, "speculative": False,
                                  "is_processing": "yes"}])
    assert config == {
        "server": "llama-server", "build_info": "b1-x",
        "slots": [{"id": 0, "n_ctx": None, "speculative": False, "is_processing": None}],
        "speculative": False,
        "set_aside": ["/props total_slots: nan, not a count from 1 to 4096",
                      "/props n_ctx: inf, not a count from 1 to 4294967295",
                      "/slots n_ctx: nan, not a count from 1 to 4294967295",
                      "/slots is_processing: a text of 3 characters, not true or false"],
    }
    # before: the header record refused NaN and `run` died with a 0-byte log
    log = SessionLog(tmp_path / "s.jsonl", {"kind": "session", "engine_config": config})
    log.close()
    assert read_log(tmp_path / "s.jsonl").header.engine_config == config


def test_a_negative_slot_count_is_not_shown_as_a_count() -> None:
    config = config_from({"build_info": "b1-x", "total_slots": -3,
                          "model_path": "m" * 10_000_000}, None)
    assert "total_slots" not in config and "model_path" not in config
    assert describe(config) == (
        "llama-server b1-x: set aside: /props model_path: a text of 10000000 characters, not "
        "a text of at most 4096 characters; /props total_slots: -3, not a count from 1 to 4096")
    Header.from_json({**HEADER, "engine_config": config})  # writes and reads: no RecordError


# --- a home folder llmtop cannot write ---------------------------------------------------


@needs_namespace
def test_the_child_engines_log_falls_back_when_its_folder_is_read_only(tmp_path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    code = ("from llmtop.servers.child import EmbeddedProcess\n"
            "p = EmbeddedProcess()\n"
            "p.log_path.write_text('x')\n"  # the fallback folder is writable
            "print(p.log_path.parent)\nprint(p.log_note)\n")
    script = (f"mount -t tmpfs -o ro tmpfs {state} && XDG_STATE_HOME={state} exec "
              f"{sys.executable} -c \"$0\"")
    done = subprocess.run(["unshare", "-m", "sh", "-c", script, code], capture_output=True,
                          text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr  # before: OSError, Read-only file system
    folder, note = done.stdout.splitlines()
    shutil.rmtree(folder)
    assert Path(folder).parent == Path(os.environ.get("TMPDIR") or "/tmp")
    assert Path(folder).name.startswith("llmtop-log-")
    assert note.startswith("the embedded engine's log is in ")
    assert note.endswith(f"({state}/llmtop/log: Read-only file system; set XDG_STATE_HOME to "
                         "a writable folder to keep it there)")
