"""Where text for the notebook goes: what workers print, and tpu_nb's own notes."""

from __future__ import annotations

import sys
from collections.abc import Callable

from tpu_nb.wire.events import Event, Output

Write = Callable[[str, str], None]
"""(stream name, text): the cell's stdout/stderr, or a background run's output area."""


def write_to_sys(stream: str, text: str) -> None:
    target = sys.stderr if stream == "stderr" else sys.stdout
    target.write(text)
    target.flush()


class OutputPrinter:
    """Shows what workers print: rank 0's as is, other ranks' prefixed (on request)."""

    def __init__(self, all_ranks: bool, write: Write = write_to_sys) -> None:
        self.all_ranks = all_ranks
        self.write = write
        self._line_start: dict[tuple[int | None, str], bool] = {}

    def on_event(self, event: Event) -> None:
        if not isinstance(event, Output):
            return
        if event.rank == 0 or event.rank is None:
            self.write(event.stream, event.text)
        elif self.all_ranks:
            self.write(event.stream, self._prefixed(event))

    def _prefixed(self, event: Output) -> str:
        key = (event.rank, event.stream)
        prefix = f"[rank {event.rank}] "
        out = []
        at_start = self._line_start.get(key, True)
        for piece in event.text.splitlines(keepends=True):
            out.append(prefix + piece if at_start else piece)
            at_start = piece.endswith(("\n", "\r"))
        self._line_start[key] = at_start
        return "".join(out)
