"""System probe: warming-up semantics, units and the None-when-unknown rules."""

from __future__ import annotations

from types import SimpleNamespace

import psutil
import pytest

from llmtop.probes.system import SystemProbe, logical_cpus, machine_percent


def test_machine_percent_divides_by_logical_cpus() -> None:
    assert machine_percent(100.0, 4) == 25.0
    assert machine_percent(250.0, 8) == 31.25
    assert machine_percent(None, 4) is None


def test_first_sample_is_warming_up_then_real() -> None:
    probe = SystemProbe()
    first = probe.sample()
    assert first.cpu_percent is None and first.per_cpu == ()
    second = probe.sample()
    assert second.cpu_percent is not None and 0.0 <= second.cpu_percent <= 100.0
    assert len(second.per_cpu) == logical_cpus() == second.logical_cpus
    assert all(0.0 <= v <= 100.0 for v in second.per_cpu)


def test_memory_figures_are_bytes_and_consistent() -> None:
    s = SystemProbe().sample()
    vm = psutil.virtual_memory()
    assert s.mem_total == vm.total  # total does not change between the two reads
    assert 0 < s.mem_available <= s.mem_total
    assert 0.0 <= s.mem_percent <= 100.0
    assert 0 <= s.swap_used <= max(s.swap_total, s.swap_used)
    if s.load_avg_per_core is not None:
        assert s.load_avg_per_core >= 0.0


@pytest.mark.parametrize(
    ("battery", "expected"),
    [
        (None, None),  # no battery (desktop) or unknown
        (SimpleNamespace(power_plugged=True), False),
        (SimpleNamespace(power_plugged=False), True),
        (SimpleNamespace(power_plugged=None), None),
    ],
)
def test_on_battery(
    monkeypatch: pytest.MonkeyPatch, battery: object, expected: bool | None
) -> None:
    monkeypatch.setattr(psutil, "sensors_battery", lambda: battery, raising=False)
    assert SystemProbe().sample().on_battery is expected


def test_unknown_frequency_is_none_not_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        psutil, "cpu_freq", lambda: SimpleNamespace(current=2400.0, min=0.0, max=0.0)
    )
    s = SystemProbe().sample()
    assert (s.cpu_freq_mhz, s.cpu_freq_max_mhz) == (2400.0, None)
    monkeypatch.setattr(psutil, "cpu_freq", lambda: None)
    s = SystemProbe().sample()
    assert (s.cpu_freq_mhz, s.cpu_freq_max_mhz) == (None, None)
