"""A user's exception in a worker, formatted as IPython would show it in the cell."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from types import TracebackType
from typing import Any

_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)


def format_user_traceback(error: BaseException) -> list[str]:
    """The traceback from the user's first frame on, as IPython would show it."""
    tb = _skip_own_frames(error.__traceback__)
    shell = _ipython_shell()
    if shell is not None:
        # tb_offset=0: the shell's formatter skips its first frame by default
        # (IPython's own run_code frame) on IPython 7.x, which here would be the
        # cell's only frame; IPython 8+ no longer applies that default.
        return list(shell.InteractiveTB.structured_traceback(type(error), error, tb, tb_offset=0))
    return "".join(traceback.format_exception(type(error), error, tb)).rstrip("\n").split("\n")


def _skip_own_frames(tb: TracebackType | None) -> TracebackType | None:
    first = tb
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        tb = tb.tb_next
    return tb or first


def _ipython_shell() -> Any:
    """The notebook's shell, forked with the worker (its cell cache names the cells' lines)."""
    if "IPython" not in sys.modules:
        return None
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.instance() if InteractiveShell.initialized() else None
