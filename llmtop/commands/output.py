"""Where a command's report goes: standard output, or the file named by --out."""

from __future__ import annotations

import sys


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
