"""The checks a pod run's cells pass before anything starts, and the cells turned into the run's program.

Pure logic beside the IPython glue in `tpu_nb.magics`: cells come in
as text with their names, problems go out saying what to change
(IPython-only lines, names only unrecorded cells defined).
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Mapping, Sequence
from typing import Any

from tpu_nb.kernel.endings.notebook_errors import refused
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.pod.program import PodProgram
from tpu_nb.kernel.pod.recording import ipython_syntax
from tpu_nb.wire.run_directory import Cell

PREPARE_MAGIC = "%%tpu_prepare"
WORKER_NAMES = frozenset({"device", "rank", "world_size", "report", "mesh"})  # what every worker's cell is given


def not_plain_python(magic: str, source: str, transformed: str) -> str | None:
    """What to change in a cell for the pod with an IPython-only line, which `train.py` cannot run; None if it has none."""
    found = ipython_syntax(source, transformed)
    if found is None:
        return None
    return (
        f"{magic}: line {found.line} (`{found.text}`) is IPython syntax (a magic or a ! command), which train.py on the "
        f"pod's hosts cannot run. Write it in Python, or move it to a cell without {magic} (install packages on the "
        "hosts themselves: see docs/guides/pod-slices.md)."
    )


def pod_program(
    prepared: tuple[Cell, ...], name: str, line: str, cell: str, return_names: tuple[str, ...], options: LaunchOptions
) -> PodProgram:
    """The program of a `%%tpu_train --pod` cell: the recorded cells, then this one."""
    train = Cell(name, f"%%tpu_train {line}".rstrip(), cell)
    return PodProgram(prepared, train, return_names, options.spmd, options.mesh, options.doctor, options.compile_cache, options.watchdog)


def check_names_recorded(prepared: Sequence[Cell], train: Cell, namespace: Mapping[str, Any]) -> None:
    """`LaunchRefused` naming each cell of the program that uses a name only unrecorded cells defined."""
    missing = names_from_unrecorded_cells(prepared, train, namespace)
    if missing:
        listed = "; ".join(f"{cell} uses {', '.join(f'`{name}`' for name in names)}" for cell, names in missing.items())
        raise refused(
            f"%%tpu_train --pod: {listed}, which only cells not marked {PREPARE_MAGIC} defined; the pod's hosts run only "
            f"the recorded cells and this one. Add {PREPARE_MAGIC} to the cells that define them and run those again, "
            "or define the names in a recorded cell or this one.",
            pod=True,
        )


def names_from_unrecorded_cells(prepared: Sequence[Cell], train: Cell, namespace: Mapping[str, Any]) -> dict[str, list[str]]:
    """By cell name: the names a cell of the program uses that only the notebook has.

    The hosts run only the recorded cells and the training cell, in order, so
    such a name would be a NameError there, after the run directory was
    copied and every host started. Anything a cell binds anywhere (a
    function's parameter, a loop variable) counts as defined, in that cell
    and the ones after it: a name is only flagged when it can only have come
    from a cell the hosts do not run.
    """
    defined = set(WORKER_NAMES) | set(dir(builtins))
    found = {}
    for cell in (*prepared, train):
        tree = ast.parse(cell.source)
        defined |= _bound_names(tree)
        used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
        missing = sorted(name for name in used - defined if name in namespace and not name.startswith("_"))
        if missing:
            found[cell.name] = missing
    return found


def _bound_names(tree: ast.AST) -> set[str]:
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            bound |= set(node.names)
    return bound
