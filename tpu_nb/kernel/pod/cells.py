"""Notebook cells for a pod run: a `%%tpu_prepare` cell recorded, a `%%tpu_train --pod` cell turned into its program.

Pure logic beside the IPython glue in `tpu_nb.kernel.magics`: cells come in
as text with their names, problems go out as `UsageError`s that say what to
change.
"""

from __future__ import annotations

from IPython.core.error import UsageError

from tpu_nb.wire.mesh import MeshShape
from tpu_nb.workers.host import Cell

from .program import PodProgram
from .recording import PreparedCells, ipython_syntax

PREPARE_MAGIC = "%%tpu_prepare"


def check_plain_python(magic: str, source: str, transformed: str) -> None:
    """`UsageError` if a cell for the pod has IPython-only lines, which `train.py` cannot run."""
    found = ipython_syntax(source, transformed)
    if found is not None:
        raise UsageError(
            f"{magic}: line {found.line} (`{found.text}`) is IPython syntax (a magic or a ! command), which train.py on the "
            "pod's hosts cannot run; nothing was run. Write it in Python, or move it to a cell without "
            f"{magic} (install packages on the hosts themselves: see the README, 'Pod slices')."
        )


def pod_program(
    prepared: PreparedCells,
    name: str,
    line: str,
    cell: str,
    return_names: tuple[str, ...],
    spmd: bool,
    mesh: MeshShape | None,
    doctor: bool,
    compile_cache: str | None,
) -> PodProgram:
    """The program of a `%%tpu_train --pod` cell: the recorded cells, then this one."""
    train = Cell(name, f"%%tpu_train {line}".rstrip(), cell)
    return PodProgram(prepared.cells(), train, return_names, spmd, mesh, doctor, compile_cache)
