"""`--dataset FILE` for bench and load: the file read before anything is measured, its bad
records named on stderr (each one skipped, the rest kept)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from llmtop.exitcodes import UsageError
from llmtop.safetext import visible

if TYPE_CHECKING:
    from llmtop.sessions.measure.dataset import Dataset

SHOWN_ERRORS = 10  # bad records named on stderr; the rest are counted


def dataset_from_flags(args: argparse.Namespace, who: str) -> Dataset | None:
    """The dataset `--dataset` names (None without the flag); UsageError saying why the
    file cannot be used at all. Each bad record's error (line and field) is printed on
    stderr as "<who>: …", the first SHOWN_ERRORS of them, then how many were skipped in all."""
    from llmtop.sessions.measure.dataset import DatasetError, describe, read_dataset

    path = getattr(args, "dataset", None)
    if path is None:
        return None
    try:
        dataset = read_dataset(path)
    except DatasetError as exc:
        raise UsageError(f"--dataset: {visible(str(exc))}") from None
    for error in dataset.errors[:SHOWN_ERRORS]:
        print(f"{who}: --dataset {dataset.name}: skipped {visible(error)}", file=sys.stderr)
    if dataset.skipped > SHOWN_ERRORS:
        print(f"{who}: --dataset {dataset.name}: {dataset.skipped - SHOWN_ERRORS} more bad "
              "records skipped", file=sys.stderr)
    print(f"{who}: dataset {describe(dataset.identity())}", file=sys.stderr, flush=True)
    return dataset
