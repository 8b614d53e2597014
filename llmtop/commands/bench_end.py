"""How a bench's run ends, said the same by `llmtop bench` and `bench --engines`."""

from __future__ import annotations

import sys
from collections.abc import Awaitable
from typing import TypeVar

from llmtop.exitcodes import ExitCode, UsageError

T = TypeVar("T")


async def bench_ended(run: Awaitable[T], where: str = "") -> T | int:
    """What `run` (a bench's or a bench set's run) returned, or how it ended, said on stderr:
    a calibration that failed is ExitCode.REQUEST_FAILED, a NOISY preflight under
    --require-quiet ExitCode.NOISY (`where`: the log, named after it); a bad thresholds
    config raises UsageError."""
    from llmtop.probes.config import ConfigError
    from llmtop.sessions.runners.bench import NoisyMachine
    from llmtop.sessions.runners.calibration import CalibrationError

    try:
        return await run
    except CalibrationError as exc:
        print(f"llmtop bench: calibration failed: {exc}", file=sys.stderr)
        return ExitCode.REQUEST_FAILED
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    except NoisyMachine as exc:
        print(f"llmtop bench: not started ({exc}); --require-quiet was given"
              + (f". {where}" if where else ""), file=sys.stderr)
        return ExitCode.NOISY
