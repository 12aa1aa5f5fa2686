"""A notebook cell as a program for the workers, and its results for the notebook.

Pure logic: the IPython glue in `tpu_nb.magics` hands in the transformed
source and the user's namespace, and applies what comes back.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from types import CodeType
from typing import Any

from tpu_nb.launcher.control import StopTraining
from tpu_nb.launcher.program import WorkerContext
from tpu_nb.launcher.transfer import ModuleWeights, NotTransferable, module_weights

VALUE = "value"
MISSING = "missing"
_RETURN = "return:"


@dataclass(frozen=True, slots=True)
class CellProgram:
    """Runs a cell's code in each worker, in (a fork of) the notebook's namespace."""

    body: CodeType
    last_expression: CodeType | None
    namespace: dict[str, Any]
    return_names: tuple[str, ...]
    notebook_modules: frozenset[str]  # --return names bound to a torch module in the notebook

    @classmethod
    def compile(
        cls, source: str, filename: str, namespace: dict[str, Any], return_names: tuple[str, ...], first_line: int = 1
    ) -> CellProgram:
        """Compile `source` whose first line is line `first_line` of `filename`.

        A trailing expression is kept apart so its value can be the cell's
        result, as in a normal cell (unless the source ends with ';').
        """
        # Blank lines in front make every line number, syntax errors' too, count from `first_line`.
        tree = ast.parse("\n" * (first_line - 1) + source, filename)
        last_expression = None
        if tree.body and isinstance(tree.body[-1], ast.Expr) and not source.rstrip().endswith(";"):
            last_expression = compile(ast.Expression(tree.body.pop().value), filename, "eval")
        body = compile(tree, filename, "exec")
        return cls(body, last_expression, namespace, return_names, _module_names(namespace, return_names))

    def run(self, context: WorkerContext) -> dict[str, Any]:
        from tpu_nb.progress.reporter import report

        # Several devices in one process (TPU v2/v3) run as threads: give each
        # its own top-level names. Otherwise use the fork's namespace itself,
        # so functions from earlier cells see `device` and `rank` too.
        namespace = self.namespace if context.devices_in_process == 1 else dict(self.namespace)
        namespace.update(device=context.device, rank=context.rank, world_size=context.world_size, report=report)
        parts: dict[str, Any] = {}
        try:
            exec(self.body, namespace)
        except StopTraining:
            pass  # a graceful stop: what was trained so far still comes back
        else:
            if self.last_expression is not None:
                parts[VALUE] = eval(self.last_expression, namespace)
        if context.rank == 0:
            parts[MISSING] = tuple(name for name in self.return_names if name not in namespace)
            for name in self.return_names:
                if name in namespace:
                    value = namespace[name]
                    parts[_RETURN + name] = module_weights(value) if name in self.notebook_modules and _is_module(value) else value
        return parts


@dataclass(frozen=True, slots=True)
class CellResult:
    """What the notebook gets back from rank 0."""

    value: Any
    has_value: bool
    returned: dict[str, Any]
    updated_in_place: tuple[str, ...]
    assigned: tuple[str, ...]
    kept: tuple[str, ...]
    missing: tuple[str, ...]
    not_transferable: tuple[str, ...]


_UNBOUND = object()


def bindings(namespace: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """What each name is bound to now, to tell later whether the user rebound it."""
    return {name: namespace.get(name, _UNBOUND) for name in names}


def apply_results(parts: dict[str, Any], namespace: dict[str, Any], unless_rebound: dict[str, Any] | None = None) -> CellResult:
    """Put rank 0's `--return` values into the notebook; modules are updated in place.

    With `unless_rebound` (the `bindings` at launch), a name the user has
    bound to something else since is kept as it is and listed in `kept`.
    """
    returned: dict[str, Any] = {}
    updated, assigned, kept, not_transferable = [], [], [], []
    for key, value in parts.items():
        if not key.startswith(_RETURN):
            continue
        name = key[len(_RETURN) :]
        returned[name] = value
        if isinstance(value, NotTransferable):
            not_transferable.append(f"{name} ({value.reason})")
        elif unless_rebound is not None and namespace.get(name, _UNBOUND) is not unless_rebound.get(name, _UNBOUND):
            kept.append(name)
        elif isinstance(value, ModuleWeights) and _is_module(namespace.get(name)):
            namespace[name].load_state_dict(value.state_dict)
            updated.append(name)
        else:
            namespace[name] = value
            assigned.append(name)
    return CellResult(
        value=parts.get(VALUE),
        has_value=VALUE in parts,
        returned=returned,
        updated_in_place=tuple(updated),
        assigned=tuple(assigned),
        kept=tuple(kept),
        missing=tuple(parts.get(MISSING, ())),
        not_transferable=tuple(not_transferable),
    )


def _module_names(namespace: dict[str, Any], names: tuple[str, ...]) -> frozenset[str]:
    return frozenset(name for name in names if _is_module(namespace.get(name)))


def _is_module(value: Any) -> bool:
    # Only ask torch if the notebook imported it: a cell that never did has no modules.
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.nn.Module)
