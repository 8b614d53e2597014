"""How a bench's run ends, said the same by `bench` and `bench --engines`
(commands/bench_end.bench_ended): a calibration that fails is REQUEST_FAILED, a NOISY preflight
under --require-quiet is NOISY (the log named), a bad thresholds config a usage error."""

from __future__ import annotations

import pytest

from llmtop.commands.bench_end import bench_ended
from llmtop.exitcodes import ExitCode, UsageError
from llmtop.probes.config import ConfigError
from llmtop.sessions.records.schema import PreflightRecord
from llmtop.sessions.runners.bench import NoisyMachine
from llmtop.sessions.runners.calibration import CalibrationError


async def _raising(exc: Exception) -> int:
    raise exc


async def test_each_ending_has_its_exit_code_and_its_line(capsys: pytest.CaptureFixture[str]):
    async def done() -> str:
        return "outcome"

    assert await bench_ended(done()) == "outcome"
    failed = await bench_ended(_raising(CalibrationError("no target reached")))
    assert failed == ExitCode.REQUEST_FAILED
    assert "calibration failed: no target reached" in capsys.readouterr().err
    noisy = await bench_ended(_raising(NoisyMachine(PreflightRecord(verdict="NOISY"))),
                              "Log: b.jsonl")
    err = capsys.readouterr().err
    assert noisy == ExitCode.NOISY and "--require-quiet was given. Log: b.jsonl" in err
    with pytest.raises(UsageError, match="bad key"):
        await bench_ended(_raising(ConfigError("bad key")))
