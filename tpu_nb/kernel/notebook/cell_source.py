"""Naming a `%%tpu_train` cell's source, so worker tracebacks point at the lines the user sees.

The cell is cached as written (magic line included) under the running cell's
prompt number, the way IPython caches a normal cell, so a worker's traceback
shows "Cell In[3], line 4" (IPython 8+) or the cell's file (IPython 7.x) with
the cell's own lines.
"""

from __future__ import annotations

import re
import sys
from typing import Any

_PROMPT_NUMBER = re.compile(r"In\[(\d+)\]")


def cache_as_written(shell: Any, line: str, cell: str) -> str:
    """Cache `%%tpu_train line` + cell in IPython's compiler; the filename to compile it with."""
    as_written = f"%%tpu_train {line}".rstrip() + "\n" + cell
    return shell.compile.cache(as_written, running_cell_number(shell), raw_code=as_written)  # type: ignore[no-any-return]


def running_cell_number(shell: Any) -> int:
    """The prompt number (In [N]) of the cell running now.

    IPython 8+ counts a cell before running it when it stores history, so
    inside the cell `execution_count` is already N + 1; IPython 7.x (Colab
    ships 7.34) counts after, so there it is N. IPython 8+'s compiler knows
    the number it gave each cell's code (`format_code_name`): ask it about
    the frames that called us. Without a cell among them (a call from plain
    Python), or on 7.x, `execution_count` is right.
    """
    format_code_name = getattr(shell.compile, "format_code_name", None)  # IPython 8+
    if format_code_name is not None:
        frame = sys._getframe(1)
        while frame is not None:
            label = format_code_name(frame.f_code.co_filename)  # e.g. ("Cell", "In[3]")
            match = _PROMPT_NUMBER.fullmatch(label[1]) if label else None
            if match:
                return int(match.group(1))
            frame = frame.f_back  # type: ignore[assignment]
    return int(shell.execution_count)
