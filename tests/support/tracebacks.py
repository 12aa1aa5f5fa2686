"""How IPython heads a traceback frame that lies in a notebook cell.

IPython 8+ writes "Cell In[3], line 4" (and ", in f(x)" for a function).
IPython 7.x (Colab ships 7.34) writes the cell's file and the function,
"<ipython-input-3-1a2b3c4d5e6f> in <module>" in a plain shell, or
"/tmp/ipykernel_42/2861474734.py in f(x)" in ipykernel, and no line
number: the arrow line ("----> 4 ...") shows it.
"""

from __future__ import annotations

import re

import IPython


def cell_frame_header(execution_count: int, line: int, function: str = "<module>") -> re.Pattern[str]:
    """A pattern for the header of a frame at `line` of cell `execution_count`, in `function`."""
    if IPython.version_info[0] >= 8:
        suffix = "" if function == "<module>" else f", in {re.escape(function)}\\("
        return re.compile(rf"^Cell In\[{execution_count}\], line {line}{suffix}", re.MULTILINE)
    cell_file = rf"(?:<ipython-input-{execution_count}-[0-9a-f]+>|\S*/ipykernel_\d+/\d+\.py)"
    return re.compile(rf"^{cell_file} in {re.escape(function)}", re.MULTILINE)


def arrow_line(line: int, source: str) -> re.Pattern[str]:
    """The "----> 4 source" line that marks where a frame was."""
    return re.compile(rf"^-+> ?{line} +{re.escape(source)}$", re.MULTILINE)
