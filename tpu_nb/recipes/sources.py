"""Where a dataset or model comes from, judged from its name alone (no I/O beyond `os.path`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from tpu_nb.recipes.config import DEMO_DATASET

DatasetKind = Literal["demo", "file", "hub"]

# File suffix -> the `datasets` builder that reads it.
DATA_FILE_BUILDERS = {
    ".csv": "csv",
    ".tsv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".parquet": "parquet",
    ".txt": "text",
}
# Suffixes of data files `datasets` cannot read as they are: named so the user is told, not sent to the Hub.
UNSUPPORTED_FILE_SUFFIXES = (".xlsx", ".xls", ".ods", ".arrow", ".feather", ".pkl", ".pickle", ".h5", ".zip", ".gz", ".tar")


def dataset_kind(dataset: str) -> DatasetKind:
    if dataset == DEMO_DATASET:
        return "demo"
    return "file" if looks_like_path(dataset) else "hub"


def looks_like_path(name: str) -> bool:
    """A local path rather than a Hub id: it exists, is spelled like a path, or ends like a file."""
    if os.path.exists(os.path.expanduser(name)):
        return True
    if name.startswith(("/", "./", "../", "~", ".\\")) or name.count("/") > 1 or "\\" in name:
        return True
    return file_suffix(name) in (*DATA_FILE_BUILDERS, *UNSUPPORTED_FILE_SUFFIXES)


def file_suffix(name: str) -> str:
    """The lower-case suffix of a file name ("Qwen/Qwen2.5-0.5B" has ".5b": only known suffixes mean a file)."""
    return os.path.splitext(os.path.basename(name))[1].lower()


def file_builder(path: str) -> str | None:
    """The `datasets` builder for a data file, or None when its format is not supported."""
    return DATA_FILE_BUILDERS.get(file_suffix(path))


def display_path(path: Path) -> str:
    """A path relative to the working directory when it is below it ("./data.csv"), else absolute."""
    absolute = path.absolute()
    try:
        relative = absolute.relative_to(Path.cwd())
    except ValueError:
        return str(absolute)
    return "." if relative == Path() else f"./{relative}"
