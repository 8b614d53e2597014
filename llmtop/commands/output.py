"""Where a command's report goes: standard output, or the file named by --out."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from llmtop.files import output_problem


def emit(text: str, out: str | None, prog: str) -> bool:
    """Print `text`, or write it to `out` and say so on stderr. Returns False when the file
    cannot be written (the reason printed as "<prog>: cannot write …")."""
    if not out:
        sys.stdout.write(text)
        return True
    try:
        with open(out, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        print(f"{prog}: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return False
    print(f"{prog}: written to {out}", file=sys.stderr)
    return True


def out_refused(args: argparse.Namespace, reads: Iterable[str | None], prog: str) -> bool:
    """Whether `args.out` must not be written (files.output_problem: it is a file this
    command reads, or an existing file that is not an llmtop report and no `--force`); the
    reason printed as "<prog>: …". Checked before the command's work, not after it."""
    out = getattr(args, "out", None)
    if not out:
        return False
    problem = output_problem(out, reads, bool(getattr(args, "force", False)))
    if problem is not None:
        print(f"{prog}: {problem}", file=sys.stderr)
    return problem is not None
