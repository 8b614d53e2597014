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


# --- one /proc/stat read per sample: the CPU shares computed here, psutil's formula


def _times(**kw: float) -> object:
    scputimes = type(psutil.cpu_times())  # psutil's own tuple type, with this OS's fields
    fields = dict.fromkeys(scputimes._fields, 0.0)
    fields.update(kw)
    return scputimes(**fields)


def test_busy_percent_leaves_out_idle_iowait_and_guest() -> None:
    from llmtop.probes.system import _busy_percent

    before = _times(user=10.0, system=5.0, idle=100.0)
    # +3 user, +1 system, +4 idle, +2 iowait (on Linux): busy 4 of 10 s (on Linux iowait
    # is not busy; elsewhere the tuple has no iowait and it is 4 of 8)
    after = _times(user=13.0, system=6.0, idle=104.0, **({"iowait": 2.0} if hasattr(
        before, "iowait") else {}))
    expected = 40.0 if hasattr(before, "iowait") else 50.0
    assert _busy_percent(before, after) == pytest.approx(expected)
    assert _busy_percent(after, after) == 0.0  # no time passed
    if hasattr(before, "guest"):  # guest time is inside user already: not counted twice
        guest = _times(user=13.0, system=6.0, idle=104.0, iowait=2.0, guest=3.0)
        assert _busy_percent(before, guest) == pytest.approx(40.0)


def test_a_steal_counter_that_runs_backwards_is_set_aside_not_read_as_zero() -> None:
    from llmtop.probes.system import SystemProbe, _busy_percent

    if not hasattr(psutil.cpu_times(), "steal"):
        pytest.skip("this OS's cpu_times has no steal counter")
    before = _times(user=10.0, idle=100.0, steal=5000.0)
    # +6 user, +4 idle, steal 1000 s back (psutil #1210): busy 6 of 10 s; summed whole,
    # the drop swallowed the 10 s and read CPU 0 %
    after = _times(user=16.0, idle=104.0, steal=4000.0)
    assert _busy_percent(before, after) == pytest.approx(60.0)
    probe = SystemProbe(limits=None)
    probe._prev = (0, [before], None)
    busy, shares, steal, _, _ = probe._rates(10**9, [after], None)
    assert busy == pytest.approx(60.0) and shares == (pytest.approx(60.0),)
    assert steal is None  # absent, not 0 % (nor -100 %)
    forward = _times(user=16.0, idle=104.0, steal=5002.0)  # +2 steal of 12 s: 16.7 %
    probe._prev = (0, [before], None)
    assert probe._rates(10**9, [forward], None)[2] == pytest.approx(100 * 2 / 12)


def test_machine_times_are_the_per_cpu_times_added() -> None:
    from llmtop.probes.system import _summed

    total = _summed([_times(user=1.0, idle=2.0), _times(user=3.0, idle=4.0)])
    assert (total.user, total.idle) == (4.0, 6.0)


def test_optional_readings_are_read_at_most_every_period() -> None:
    from llmtop.probes.system import _Every

    reads: list[int] = []
    every = _Every(lambda: reads.append(1) or len(reads), period_s=2.0)
    assert every.get(0) == 1
    assert every.get(1_999_999_999) == 1  # within the period: the last value
    assert every.get(2_000_000_000) == 2 and len(reads) == 2


def test_cpu_shares_agree_with_psutil_over_the_same_window() -> None:
    # psutil's cpu_percent over its own window and the probe's over the window it saw: both
    # are busy/total of /proc/stat; the windows differ by the time between the two reads,
    # so they agree within a few points, and each per-CPU figure lies in 0-100.
    probe = SystemProbe(None)
    probe.sample()
    psutil.cpu_percent(None)
    sum(i * i for i in range(300_000))  # some CPU work inside both windows
    ours = probe.sample()
    theirs = psutil.cpu_percent(None)
    assert ours.cpu_percent is not None
    assert abs(ours.cpu_percent - theirs) <= 25.0
    assert len(ours.per_cpu) == logical_cpus() and all(0.0 <= v <= 100.0 for v in ours.per_cpu)
