"""Where a command's report goes: standard output, or the file named by --out."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from llmtop.exitcodes import UsageError
from llmtop.files import output_problem


def emit(text: str, out: str | None, prog: str) -> None:
    """Print `text`, or write it to `out` and say so on stderr ("<prog>: written to …").
    Raises UsageError ("cannot write …") when the file cannot be written."""
    if not out:
        sys.stdout.write(text)
        return
    try:
        with open(out, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    print(f"{prog}: written to {out}", file=sys.stderr)


def refuse_out(args: argparse.Namespace, reads: Iterable[str | None]) -> None:
    """Raise UsageError when `args.out` must not be written (files.output_problem: it is a
    file this command reads, or an existing file that is not an llmtop report and no
    `--force`). Checked before the command's work, not after it."""
    out = getattr(args, "out", None)
    if not out:
        return
    problem = output_problem(out, reads, bool(getattr(args, "force", False)))
    if problem is not None:
        raise UsageError(problem)
