"""The lines of the user's step whose sizes can change from step to step, read from the step's source.

torch_xla's analysis names the line where a graph was cut and compiled (a
`torch_xla.sync()`), not the line whose sizes changed. A tensor made on the
device at a size computed in the loop (`torch.randn(4 + step, 8,
device=device)`), a slice to such a size (`x[:, :length]`) or a
data-dependent op (`x.nonzero()`, `x[x > 0]`) never crosses a `.to(device)`
the doctor could watch; the source of the loop around the compiling line
(a cell's, from linecache) names them, parsed once per place, at no cost to
the step.
"""

from __future__ import annotations

import ast
import functools
import linecache
from dataclasses import dataclass
from typing import Literal

from tpu_nb.workers.doctor.analysis_log import Frame

FACTORIES = frozenset({"randn", "rand", "randint", "zeros", "ones", "empty", "full", "arange", "linspace", "randperm", "eye"})
DATA_DEPENDENT = frozenset({"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive"})
MOST_SUSPECTS = 3

SuspectKind = Literal["made", "sliced", "data-dependent"]


@dataclass(frozen=True, slots=True)
class Suspect:
    """A line of the step that makes sizes from values: a tensor made on the device, a slice, a data-dependent op."""

    frame: Frame  # its line, in the compiling frame's function
    kind: SuspectKind


def suspects(frame: Frame) -> tuple[Suspect, ...]:
    """The suspects in the loop (else the function) around `frame`'s line, in line order; () where the source is unknown."""
    tree = _tree(frame.filename)
    if tree is None:
        return ()
    scope = _innermost_scope(tree, frame.line)
    if scope is None:
        return ()
    changing = _assigned_in(scope)
    found: dict[int, SuspectKind] = {}
    for node in ast.walk(scope):
        kind = _kind(node, changing)
        if kind is not None and isinstance(node, ast.expr):
            found.setdefault(node.lineno, kind)
    return tuple(Suspect(Frame(frame.function, frame.filename, line), kind) for line, kind in sorted(found.items())[:MOST_SUSPECTS])


@functools.lru_cache(maxsize=32)
def _tree(filename: str) -> ast.Module | None:
    lines = linecache.getlines(filename)
    if not lines:
        return None
    # A cell's magic lines (%%tpu_train ...) are not Python: blanked, so line numbers stay the cell's.
    source = "".join("\n" if line.lstrip().startswith(("%", "!")) else line for line in lines)
    try:
        return ast.parse(source, filename)
    except SyntaxError:
        return None


def _innermost_scope(tree: ast.Module, line: int) -> ast.AST | None:
    """The innermost loop around `line`, else the innermost function (nested ones start later)."""
    around = [
        node
        for node in ast.walk(tree)
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.lineno <= line <= (node.end_lineno or node.lineno)
    ]
    loops = [node for node in around if isinstance(node, (ast.For, ast.AsyncFor, ast.While))]
    return max(loops or around, key=lambda node: node.lineno, default=None)


def _assigned_in(scope: ast.AST) -> frozenset[str]:
    """Names that take a new value in the scope: loop variables, assignments, a function's parameters."""
    names = set()
    for node in ast.walk(scope):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return frozenset(names)


def _kind(node: ast.AST, changing: frozenset[str]) -> SuspectKind | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        name = node.func.attr
        if name in DATA_DEPENDENT:
            return "data-dependent"
        on_device = any(keyword.arg == "device" for keyword in node.keywords)
        sizes = [*node.args, *(keyword.value for keyword in node.keywords if keyword.arg in ("size", "end", "start", "steps"))]
        if name in FACTORIES and on_device and any(_uses(size, changing) for size in sizes):
            return "made"
    if isinstance(node, ast.Subscript):
        index = node.slice
        parts = index.elts if isinstance(index, ast.Tuple) else [index]
        if any(isinstance(part, ast.Compare) for part in parts):
            return "data-dependent"  # x[x > 0]: as many elements as the values say
        bounds = [bound for part in parts if isinstance(part, ast.Slice) for bound in (part.lower, part.upper) if bound is not None]
        if any(_uses(bound, changing) for bound in bounds):
            return "sliced"
    return None


def _uses(expression: ast.AST, names: frozenset[str]) -> bool:
    return any(isinstance(node, ast.Name) and node.id in names for node in ast.walk(expression))
