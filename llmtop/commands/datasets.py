"""`--dataset FILE` for bench and load: the file read before anything is measured, its bad
records named on stderr (each one skipped, the rest kept)."""

from __future__ import annotations

import argparse
import sys

from llmtop.exitcodes import ExitCode
from llmtop.safetext import visible
from llmtop.sessions.measure.dataset import Dataset, DatasetError, describe, read_dataset

SHOWN_ERRORS = 10  # bad records named on stderr; the rest are counted


def dataset_from_flags(args: argparse.Namespace, who: str) -> Dataset | None | ExitCode:
    """The dataset `--dataset` names (None without the flag), or ExitCode.USAGE after saying
    why the file cannot be used at all. Each bad record's error (line and field) is printed,
    the first SHOWN_ERRORS of them, then how many were skipped in all."""
    path = getattr(args, "dataset", None)
    if path is None:
        return None
    try:
        dataset = read_dataset(path)
    except DatasetError as exc:
        print(f"{who}: --dataset: {visible(str(exc))}", file=sys.stderr)
        return ExitCode.USAGE
    for error in dataset.errors[:SHOWN_ERRORS]:
        print(f"{who}: --dataset {dataset.name}: skipped {visible(error)}", file=sys.stderr)
    if dataset.skipped > SHOWN_ERRORS:
        print(f"{who}: --dataset {dataset.name}: {dataset.skipped - SHOWN_ERRORS} more bad "
              "records skipped", file=sys.stderr)
    print(f"{who}: dataset {describe(dataset.identity())}", file=sys.stderr, flush=True)
    return dataset
