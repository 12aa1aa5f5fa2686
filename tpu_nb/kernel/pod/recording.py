"""The `%%tpu_prepare` cells a kernel ran: the first part of every pod run's program.

`RECORDED` is the one record: `%%tpu_prepare` writes it, `%%tpu_train
--pod` and `tpu_nb.pod.launch` read it. A cell run again replaces its
earlier run where it stood (the frontend's cell id tells it apart; without
one, its text does), so editing and rerunning a preparation cell does not
run it twice on the hosts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tpu_nb.wire.run_directory import Cell

_IPYTHON_CALL = re.compile(r"\bget_ipython\(\)")


@dataclass(frozen=True, slots=True)
class IPythonSyntax:
    """A line of a cell that only IPython can run (a magic, a `!` command), which `train.py` cannot."""

    line: int  # in the cell as written (line 1 is the cell magic)
    text: str


class PreparedCells:
    """The recorded cells, in the order they first ran."""

    def __init__(self) -> None:
        self._cells: dict[str, Cell] = {}

    def record(self, cell: Cell, cell_id: str | None) -> None:
        self._cells[cell_id or cell.source] = cell

    def cells(self) -> tuple[Cell, ...]:
        return tuple(self._cells.values())

    def clear(self) -> None:
        self._cells.clear()

    def describe(self) -> str:
        """What `%tpu_prepare --show` says: each recorded cell by name and first line."""
        lines = [f"tpu_nb: {len(self._cells)} recorded cell(s) for pod runs"]
        lines += [f"  {cell.name}: {next(iter(cell.source.strip().splitlines()), '')}" for cell in self._cells.values()]
        return "\n".join(lines)


RECORDED = PreparedCells()
"""This kernel's recorded cells (cleared when the extension is unloaded)."""


def ipython_syntax(source: str, transformed: str) -> IPythonSyntax | None:
    """The first line of `source` that IPython turned into a `get_ipython()` call, if any.

    IPython rewrites a magic or shell line into one line, so the lines of
    `source` and `transformed` correspond.
    """
    for number, (written, python) in enumerate(zip(source.split("\n"), transformed.split("\n"), strict=False), start=2):
        if _IPYTHON_CALL.search(python) and not _IPYTHON_CALL.search(written):
            return IPythonSyntax(number, written.strip())
    return None
