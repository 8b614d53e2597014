"""CSV cells that a spreadsheet reads as data, never as a formula.

A cell whose text begins with `=`, `+`, `-` or `@` (or a tab or carriage return, which some
spreadsheets skip before those) is run as a formula when the CSV is opened: a model, app,
engine or energy-source name from outside, or a crafted log's status, could be
`=HYPERLINK("http://…")` or worse. Such a cell is written with a leading apostrophe, which
spreadsheets show as the text itself (the OWASP "CSV injection" rule). A plain number keeps
its sign and stays a number: "-3.5", "+2", "-1e-05" are written as they are.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from typing import IO, Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def cell(value: Any) -> Any:
    """`value` as a CSV cell: a str that would start a formula (FORMULA_STARTS) and is not a
    plain number gets a leading "'"; anything else (numbers, None, other text) unchanged."""
    if not isinstance(value, str) or not value.startswith(FORMULA_STARTS):
        return value
    if _NUMBER.fullmatch(value):
        return value
    return "'" + value


class CsvWriter:
    """csv.writer on `out` (keyword arguments: its dialect and format options) with every
    cell passed through `cell` first; None is written as an empty cell, as csv does."""

    def __init__(self, out: IO[str], **options: Any) -> None:
        self._writer = csv.writer(out, **options)

    def writerow(self, cells: Iterable[Any]) -> None:
        """Write one row."""
        self._writer.writerow([cell(c) for c in cells])

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        """Write each row of `rows`."""
        for row in rows:
            self.writerow(row)
