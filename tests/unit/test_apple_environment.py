"""A Mac's part of the environment record (probes/apple.py mac_environment): macOS version
(platform.mac_ver), chip and model (sysctl machdep.cpu.brand_string hw.model, the recorded
outputs in tests/fixtures/apple/ citing their sources) and what the IOReport channel map was
checked on; nothing of it runs on Linux."""

from __future__ import annotations

from collections.abc import Sequence

from llmtop.probes.apple import CHANNEL_MAP_CHECKED, CHIP, mac_environment, parse_chip
from llmtop.sessions.reports.run_environment import mac_line
from tests.unit.test_apple_probe import recorded, replay


def mac_ver() -> tuple[str, tuple[str, str, str], str]:
    """platform.mac_ver() on a Mac: (release, (version, dev_stage, non_release), machine)."""
    return "15.1", ("", "", ""), "arm64"


def test_recorded_brand_strings_give_the_chip_and_model() -> None:
    assert parse_chip(recorded("sysctl_chip_m1.txt")) == {"chip": "Apple M1", "model": None}
    assert parse_chip(recorded("sysctl_chip_m1max.txt")) == {"chip": "Apple M1 Max",
                                                             "model": "MacBookPro18,2"}
    # an early machine names no chip: kept as said, not guessed
    assert parse_chip(recorded("sysctl_chip_dtk.txt"))["chip"] == "Apple processor"
    assert parse_chip("hw.model: \n") == {"chip": None, "model": None}


def test_a_mac_records_version_chip_model_and_the_channel_map() -> None:
    run = replay({CHIP: recorded("sysctl_chip_m1max.txt")})
    got = mac_environment("darwin", run, mac_ver)
    assert got == {"macos_version": "15.1", "arch": "arm64", "chip": "Apple M1 Max",
                   "model": "MacBookPro18,2", "energy_channel_map": CHANNEL_MAP_CHECKED,
                   "notes": []}
    assert "matched by name" in CHANNEL_MAP_CHECKED and "not yet run on a Mac" in \
        CHANNEL_MAP_CHECKED
    assert mac_line(got).startswith("macOS 15.1 · Apple M1 Max · MacBookPro18,2 · energy "
                                    "channels: IOReport Energy Model channels matched by name")


def test_sysctl_missing_is_a_reason_and_linux_runs_nothing() -> None:
    got = mac_environment("darwin", replay({}), mac_ver)
    assert got is not None and (got["chip"], got["model"]) == (None, None)
    assert got["notes"] == ["chip and model: sysctl is not on this machine"]
    asked: list[Sequence[str]] = []

    def run(argv: Sequence[str]) -> tuple[str | None, str | None]:
        asked.append(argv)
        return None, "not called"

    assert mac_environment("linux", run, mac_ver) is None and asked == []


def test_this_linux_machines_environment_has_no_mac_part() -> None:
    from llmtop.sessions.runners.environment import environment

    assert "mac" not in environment()
