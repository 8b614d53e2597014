"""Probes on machines unlike the developer's: missing sensors, pid 0, a process stuck in the
kernel, and the `[engine] pids` override in the config file."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from llmtop.probes import processes as procmod
from llmtop.probes.config import ConfigError, engine_pids_from_mapping, load_engine_pids
from llmtop.probes.system import SystemProbe
from llmtop.probes.verdict import evaluate

# --- optional readings: None, 0, empty, or an exception → n/a, no crash, no finding


def boom() -> Any:
    raise RuntimeError("sensor driver fell over")


Freq = SimpleNamespace


@pytest.mark.parametrize(
    ("freq", "battery", "temps"),
    [
        (lambda: None, lambda: None, dict),
        (lambda: Freq(current=0.0, min=0.0, max=0.0), lambda: Freq(power_plugged=None), dict),
        (boom, boom, boom),
        (
            lambda: Freq(current=None, max=None),
            lambda: Freq(),
            lambda: {"acpi": [Freq(current=0.0, high=None)]},
        ),
        (lambda: Freq(current=-1.0, max=float("nan")), lambda: 0, lambda: {"x": []}),
    ],
    ids=["none", "zeros", "raise", "missing-fields", "negative-nan"],
)
def test_optional_readings_are_na(
    monkeypatch: pytest.MonkeyPatch, freq: Any, battery: Any, temps: Any
) -> None:
    monkeypatch.setattr(psutil, "cpu_freq", freq)
    monkeypatch.setattr(psutil, "sensors_battery", battery, raising=False)
    monkeypatch.setattr(psutil, "sensors_temperatures", temps, raising=False)
    probe = SystemProbe(None)
    probe.sample()
    s = probe.sample()
    assert (s.cpu_freq_mhz, s.cpu_freq_max_mhz, s.on_battery) == (None, None, None)
    assert (s.temperature_c, s.temperature_high_c) == (None, None)
    codes = {f.code for f in evaluate(s, procmod.group([])).findings}
    assert not codes & {"cpu-slow", "on-battery", "hot"}


def test_missing_sensor_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("cpu_freq", "sensors_battery", "sensors_temperatures"):
        monkeypatch.delattr(psutil, name, raising=False)
    s = SystemProbe(None).sample()
    assert (s.cpu_freq_mhz, s.on_battery, s.temperature_c) == (None, None, None)


# --- [engine] pids in the config file


@pytest.mark.parametrize(
    ("doc", "pids"),
    [({}, ()), ({"engine": {}}, ()), ({"engine": {"pids": [900, 901]}}, (900, 901))],
)
def test_engine_pids_from_config(doc: dict[str, Any], pids: tuple[int, ...]) -> None:
    assert engine_pids_from_mapping(doc, "c.toml") == pids


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {"engine": {"pids": 900}},
            "c.toml: [engine] pids: expected a list of positive integers, got 900",
        ),
        (
            {"engine": {"pids": [0]}},
            "c.toml: [engine] pids: expected a list of positive integers, got [0]",
        ),
        (
            {"engine": {"pids": [True]}},
            "c.toml: [engine] pids: expected a list of positive integers, got [True]",
        ),
        ({"engine": {"pid": [1]}}, "c.toml: [engine] pid: unknown key (known keys: pids)"),
        ({"engine": 3}, "c.toml: 'engine' must be a table, got int"),
    ],
)
def test_engine_pids_errors(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        engine_pids_from_mapping(doc, "c.toml")
    assert str(err.value) == message


def test_engine_pids_file_with_thresholds(tmp_path: Path) -> None:
    from llmtop.probes.config import load_thresholds

    path = tmp_path / "config.toml"
    path.write_text("[thresholds]\napp_cpu_warn = 5\n\n[engine]\npids = [4242]\n")
    assert load_engine_pids(path) == (4242,)
    assert load_thresholds(path).app_cpu_warn == 5.0  # the [engine] table is not an error there
