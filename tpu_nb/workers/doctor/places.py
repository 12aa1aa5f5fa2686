"""A frame of the user's code, named the way the notebook names it: "In [4], line 7: loss.item()"."""

from __future__ import annotations

import linecache
import re
import sys
import sysconfig
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tpu_nb.workers.doctor.analysis_log import Frame

_LIBRARY_DIRS = tuple(
    {
        str(Path(path).resolve())
        for path in (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])
    }
)
TPU_NB_DIR = str(Path(__file__).resolve().parents[2])
TPU_NB_MARK = "<tpu_nb>"
"""Stands for another machine's copy of tpu_nb in file names (a pod host's stacks name its copy so)."""
_IPYTHON_7_CELL = re.compile(r"<ipython-input-(\d+)-")  # IPython 7.x names a cell's code this way
_LONGEST_SOURCE = 80


def first_user_frame(frames: Iterable[Frame]) -> Frame | None:
    """The innermost frame in the user's code (a notebook cell or their own module), if any."""
    for frame in frames:
        if not _is_library(frame.filename):
            return frame
    return None


def describe(frame: Frame, sources: Mapping[str, Sequence[str]] | None = None, *, function: bool = False, file: bool = True) -> str:
    """ "In [4], line 7: loss.item()" for a cell, "train.py, line 7: ..." for a file.

    `sources`: the lines of files this process does not have (a pod run's cells, by name).
    `function`: name the frame's function ("In [4], line 3, in sleeping: ..."), unless it is the cell's own code;
    `file`: False leaves the cell or file out ("line 3, in sleeping: ..."), for a call in the one named before it.
    """
    lines = sources.get(frame.filename) if sources is not None else None
    if lines is not None:
        source = lines[frame.line - 1].strip() if 0 < frame.line <= len(lines) else ""
    else:
        source = linecache.getline(frame.filename, frame.line).strip()
    if len(source) > _LONGEST_SOURCE:
        source = source[: _LONGEST_SOURCE - 1] + "…"
    where = f"line {frame.line}"
    if file:
        where = f"{_file_label(frame.filename)[:_LONGEST_SOURCE]}, {where}"
    if function and frame.function != "<module>":
        where += f", in {frame.function}"
    return f"{where}: {source}" if source else where


def _file_label(filename: str) -> str:
    match = _IPYTHON_7_CELL.search(filename)
    if match:
        return f"In [{match.group(1)}]"
    shell = _shell()
    format_code_name = getattr(getattr(shell, "compile", None), "format_code_name", None)  # IPython 8+
    label = format_code_name(filename) if format_code_name is not None else None
    if label:  # ("Cell", "In[4]")
        return label[1].replace("In[", "In [")  # type: ignore[no-any-return]
    number = _prompt_number_in_history(shell, filename) if shell is not None else None
    return f"In [{number}]" if number is not None else Path(filename).name


def _prompt_number_in_history(shell: Any, filename: str) -> int | None:
    """The prompt number of the cell whose code is in `filename`, by its source in the shell's history.

    IPython 7.x under ipykernel 6 (Colab) names a cell's code by a temporary
    file and keeps no map back to its number; the history holds each cell's
    source by number (as typed, and as run), and linecache the file's.
    """
    cached = linecache.cache.get(filename)
    if cached is None or len(cached) != 4:  # not cached, or only a lazy loader
        return None
    source = "".join(cached[2]).rstrip()
    history = shell.history_manager
    for inputs in (history.input_hist_raw, history.input_hist_parsed):
        for number in range(len(inputs) - 1, 0, -1):
            if inputs[number].rstrip() == source:
                return number
    return None


def is_tpu_nb(filename: str) -> bool:
    return filename.startswith((TPU_NB_DIR, TPU_NB_MARK))


def _is_library(filename: str) -> bool:
    if filename.startswith("<frozen") or is_tpu_nb(filename):
        return True
    return filename.startswith(_LIBRARY_DIRS) or "/site-packages/" in filename or "/dist-packages/" in filename


def _shell() -> object | None:
    """The notebook's shell, forked with the worker (it knows which file holds which cell)."""
    if "IPython" not in sys.modules:
        return None
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.instance() if InteractiveShell.initialized() else None
