"""llmtop's small cache files (calibrations, the canary's figures, prefill curves, the
llama.cpp self-test's choice), written so that a reader never sees half of one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, text: str) -> bool:
    """Write `text` (UTF-8) to `path` through a temporary file in the same folder renamed
    over it, creating the folder; a crash leaves the old file or the new one, never a torn
    one, and no temporary file behind. True when written, False when the folder or file
    cannot be written (OSError: the caller goes on without its cache)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError:
        return False
    return True
