"""A `%%tpu_train` cell's results put into the notebook (the cell is compiled by `tpu_nb.workers.programs.compile_cell`).

Pure logic: the IPython glue in `magics` hands in the user's namespace and
applies what comes back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpu_nb.wire.results import ModuleWeights, NotTransferable, RankResult
from tpu_nb.workers.programs import is_module


@dataclass(frozen=True, slots=True)
class AppliedReturns:
    """What `--return` did in the notebook."""

    returned: dict[str, Any]
    updated_in_place: tuple[str, ...]
    assigned: tuple[str, ...]
    kept: tuple[str, ...]
    missing: tuple[str, ...]
    not_transferable: tuple[str, ...]
    lost: tuple[str, ...] = ()
    """What no place could hold (the value or names), explained with the sizes and the fix."""


_UNBOUND = object()


def bindings(namespace: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """What each name is bound to now, to tell later whether the user rebound it."""
    return {name: namespace.get(name, _UNBOUND) for name in names}


def apply_returns(result: RankResult, namespace: dict[str, Any], unless_rebound: dict[str, Any] | None = None) -> AppliedReturns:
    """Put rank 0's `--return` values into the notebook; modules are updated in place.

    With `unless_rebound` (the `bindings` at launch), a name the user has
    bound to something else since is kept as it is and listed in `kept`.
    """
    updated, assigned, kept, not_transferable = [], [], [], []
    for name, value in result.returned.items():
        if isinstance(value, NotTransferable):
            not_transferable.append(f"{name} ({value.reason})")
        elif unless_rebound is not None and namespace.get(name, _UNBOUND) is not unless_rebound.get(name, _UNBOUND):
            kept.append(name)
        elif isinstance(value, ModuleWeights) and is_module(namespace.get(name)):
            namespace[name].load_state_dict(value.state_dict)
            updated.append(name)
        else:
            namespace[name] = value
            assigned.append(name)
    return AppliedReturns(
        returned=dict(result.returned),
        updated_in_place=tuple(updated),
        assigned=tuple(assigned),
        kept=tuple(kept),
        missing=result.missing,
        not_transferable=tuple(not_transferable),
        lost=tuple(lost.explain() for lost in result.lost),
    )
