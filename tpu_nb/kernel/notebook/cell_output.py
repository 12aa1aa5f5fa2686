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


class LinePrefixer:
    """Begins each line printed on a stream with `prefix`, across pieces that end mid-line (workers print in pieces).

    A line redrawn after a carriage return (a progress bar) begins again, so it gets the prefix again.
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._at_line_start: dict[str, bool] = {}

    def __call__(self, stream: str, text: str) -> str:
        out = []
        at_start = self._at_line_start.get(stream, True)
        for piece in text.splitlines(keepends=True):
            out.append(self.prefix + piece if at_start else piece)
            at_start = piece.endswith(("\n", "\r"))
        self._at_line_start[stream] = at_start
        return "".join(out)


class OutputPrinter:
    """Shows what workers print: rank 0's as is, other ranks' prefixed (on request)."""

    def __init__(self, all_ranks: bool, write: Write = write_to_sys) -> None:
        self.all_ranks = all_ranks
        self.write = write
        self._prefixers: dict[int, LinePrefixer] = {}

    def on_event(self, event: Event) -> None:
        if not isinstance(event, Output):
            return
        if event.rank == 0 or event.rank is None:
            self.write(event.stream, event.text)
        elif self.all_ranks:
            prefixer = self._prefixers.setdefault(event.rank, LinePrefixer(f"[rank {event.rank}] "))
            self.write(event.stream, prefixer(event.stream, event.text))
