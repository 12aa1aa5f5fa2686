"""torch_xla's compilation analysis, read back from its per-rank file.

With PT_XLA_DEBUG_LEVEL=1 torch_xla writes, for every graph it compiles
(never for a cached execution, so it costs nothing per step), a block like:

    Compilation Analysis: Compilation Cause
    Compilation Analysis:   most likely user code trying to access tensor value before torch_xla.sync
    Compilation Analysis: Graph Info:
    Compilation Analysis:   Graph Hash: afca108977fe00ce1f8087f327da707b
    ...
    Compilation Analysis: Python Frame Triggered Execution:
    Compilation Analysis:   sync (/.../torch_xla/torch_xla.py:87)
    Compilation Analysis:   <module> (/tmp/ipykernel_1/123.py:21)
    Compilation Analysis: -----...

(format read from torch_xla 2.8 and 2.9's debug_util.cpp output). Frames go
from the innermost out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_PREFIX = "Compilation Analysis: "
_FRAME = re.compile(r"^\s+(?P<function>.+?) \((?P<filename>.+):(?P<line>\d+)\)$")
_HASH = re.compile(r"^\s+Graph Hash: (\S+)")
_COUNT = re.compile(r"^\s+Number of Graph (?P<what>Inputs|Outputs): (?P<count>\d+)")

HOST_READ_CAUSE = "most likely user code trying to access tensor value before torch_xla.sync"


@dataclass(frozen=True, slots=True)
class Frame:
    function: str
    filename: str
    line: int


@dataclass(frozen=True, slots=True)
class Compilation:
    """One graph torch_xla compiled: why it cut the graph there, its hash, the Python frames."""

    cause: str
    graph_hash: str
    frames: tuple[Frame, ...]
    inputs: int | None = None  # the graph's parameters (weights, optimizer state, the batch)
    outputs: int | None = None

    @property
    def structure(self) -> tuple[int | None, int | None]:
        """Graphs alike in this but different in hash differ in sizes or constants, not in what they compute."""
        return self.inputs, self.outputs

    @property
    def reads_a_value(self) -> bool:
        """The graph ran because Python needed a tensor's value (.item(), print, a CPU fallback op)."""
        return self.cause == HOST_READ_CAUSE


def parse_blocks(text: str) -> list[Compilation]:
    """The complete compilation blocks in `text`."""
    compilations = []
    section = None
    cause, graph_hash, frames = "", "", list[Frame]()
    counts: dict[str, int] = {}
    for raw in text.splitlines():
        if not raw.startswith(_PREFIX):
            continue
        line = raw[len(_PREFIX) :]
        if line.startswith("Compilation Cause"):
            section, cause, graph_hash, frames, counts = "cause", "", "", [], {}
        elif line.startswith("Graph Info"):
            section = "graph"
        elif line.startswith("Python Frame Triggered Execution"):
            section = "frames"
        elif line.startswith("-----"):
            if section is not None:
                compilations.append(Compilation(cause, graph_hash, tuple(frames), counts.get("Inputs"), counts.get("Outputs")))
            section = None
        elif section == "cause" and line.strip():
            cause = line.strip()
        elif section == "graph" and (match := _HASH.match(line)):
            graph_hash = match.group(1)
        elif section == "graph" and (match := _COUNT.match(line)):
            counts[match["what"]] = int(match["count"])
        elif section == "frames" and (match := _FRAME.match(line)):
            frames.append(Frame(match["function"], match["filename"], int(match["line"])))
    return compilations


class AnalysisLog:
    """Reads the compilations torch_xla appended to `path` since the last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def read_new(self) -> list[Compilation]:
        try:
            with self.path.open("rb") as log:
                log.seek(self._offset)
                data = log.read()
        except FileNotFoundError:
            return []
        end = _end_of_last_block(data)
        self._offset += end
        return parse_blocks(data[:end].decode("utf-8", "replace"))


def _end_of_last_block(data: bytes) -> int:
    """Where the last complete block ends (its closing line written whole); 0 if none is."""
    closing = (_PREFIX + "-----").encode()
    end = len(data)
    while (start := data.rfind(closing, 0, end)) >= 0:
        newline = data.find(b"\n", start)
        if newline >= 0:
            return newline + 1
        end = start  # torch_xla is still writing this line
    return 0
