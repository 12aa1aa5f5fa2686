"""A run's results handed back to the notebook: its error raised, rank 0's `--return` values applied, its value returned.

One way for every run a cell starts, on this machine or on a pod, in the
foreground or in the background. The IPython glue in `magics` hands in the
user's namespace.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tpu_nb.kernel.endings.notebook_errors import NotReturned
from tpu_nb.kernel.endings.run_ending import Ending
from tpu_nb.kernel.notebook.adapters import adapters_to_add, add_adapters
from tpu_nb.kernel.notebook.cell_output import Write, write_to_sys
from tpu_nb.wire.results import ModuleWeights, NotTransferable, RankResult
from tpu_nb.workers.processes.programs import is_module


@dataclass(frozen=True, slots=True)
class Handback:
    """What a finished background run gives its caller: a value, the `--return` values, a problem to raise."""

    value: Any = None
    returned: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    problem: BaseException | None = None


Finish = Callable[[Ending, Write], Handback]
"""Turns a run that came back (status done or stopped) into its handback; writes notes with Write."""


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
    adapted: tuple[tuple[str, str], ...] = ()
    """(name, the adapters added to it): modules the worker had given PEFT adapters, which the notebook's copy got too."""


_UNBOUND = object()


def bindings(namespace: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """What each name is bound to now, to tell later whether the user rebound it."""
    return {name: namespace.get(name, _UNBOUND) for name in names}


def apply_returns(result: RankResult, namespace: dict[str, Any], unless_rebound: dict[str, Any] | None = None) -> AppliedReturns:
    """Put rank 0's `--return` values into the notebook; modules are updated in place.

    With `unless_rebound` (the `bindings` at launch), a name the user has
    bound to something else since is kept as it is and listed in `kept`.
    """
    updated, assigned, kept, not_transferable, adapted = [], [], [], [], []
    for name, value in result.returned.items():
        if isinstance(value, NotTransferable):
            not_transferable.append(f"{name} ({value.reason})")
        elif unless_rebound is not None and namespace.get(name, _UNBOUND) is not unless_rebound.get(name, _UNBOUND):
            kept.append(name)
        elif isinstance(value, ModuleWeights) and is_module(namespace.get(name)):
            added = adapters_to_add(namespace[name], value.adapters)
            if added:
                adapted.append((name, add_adapters(namespace[name], added)))
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
        adapted=tuple(adapted),
    )


def report_returns(applied: AppliedReturns, write: Write) -> NotReturned | None:
    """Say what came back; a missing, unpicklable or lost `--return` name (or value) is a usage error (returned, to raise)."""
    for name, adapters in applied.adapted:
        write(
            "stdout",
            f"tpu_nb: the run added adapters to `{name}` in place: {adapters}. Your `{name}` has them too now, with their "
            f"trained weights (merge them with peft's merge_and_unload, or load the adapter the Trainer saved with "
            f"PeftModel.from_pretrained(base_model, output_dir)).\n",
        )
    for name in applied.updated_in_place:
        write("stdout", f"tpu_nb: updated `{name}` in place with rank 0's trained weights.\n")
    problems = [f"--return {name}: the cell did not define `{name}` on rank 0." for name in applied.missing]
    problems += [f"--return {detail}" for detail in applied.not_transferable]
    problems += list(applied.lost)
    if problems:
        return NotReturned("\n".join(problems) + "\nEverything else was returned.")
    return None


def hand_back(ending: Ending, namespace: dict[str, Any], write: Write = write_to_sys) -> Any:
    """A foreground run's end in the notebook: its error raised, or its `--return` values applied and its value returned."""
    if ending.error is not None:
        raise ending.error
    result = ending.results[0]
    problem = report_returns(apply_returns(result, namespace), write)
    if problem is not None:
        raise problem
    return result.value if result.has_value else None


def hand_back_later(namespace: dict[str, Any], return_names: tuple[str, ...], name: str) -> Finish:
    """A background run's end in the notebook, when it comes: not over a name the user rebound meanwhile."""
    launched_with = bindings(namespace, return_names)

    def finish(ending: Ending, write: Write) -> Handback:
        result = ending.results[0]
        applied = apply_returns(result, namespace, unless_rebound=launched_with)
        for kept in applied.kept:
            write(
                "stderr",
                f"tpu_nb: kept your `{kept}`: it was rebound while `{name}` ran. The trained value is in {name}.returned[{kept!r}].\n",
            )
        problem = report_returns(applied, write)
        return Handback(result.value if result.has_value else None, applied.returned, problem)

    return finish
