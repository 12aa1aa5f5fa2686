"""What a sweep hands back: every trial's outcome and value, the comparison; its `--return` and `--return-best` values."""

from __future__ import annotations

import copy
import dataclasses
import html
from collections.abc import Sequence
from typing import Any

from tpu_nb.kernel.endings.notebook_errors import NotReturned
from tpu_nb.kernel.notebook.adapters import adapters_to_add, add_adapters
from tpu_nb.kernel.notebook.cell_output import Write, write_to_sys
from tpu_nb.kernel.notebook.returns import apply_returns, report_returns
from tpu_nb.kernel.trials.comparison import Comparison
from tpu_nb.kernel.trials.sweep import TrialOutcome
from tpu_nb.kernel.trials.sweep_returns import HeldReturns, came_back
from tpu_nb.wire.results import ModuleWeights, NotTransferable, RankResult
from tpu_nb.workers.processes.programs import is_module


class SweepResult:
    """A sweep's trials, by number, and their comparison (shown as the cell's result); a search's study."""

    def __init__(self, outcomes: Sequence[TrialOutcome], comparison: Comparison, study: Any = None) -> None:
        self.trials = tuple(outcomes)
        """Each trial's `TrialOutcome`: trial (its number and values), status, where, ending, metrics, final."""
        self.comparison = comparison
        """The table shown as the cell's result: a row per trial, ranked by the compared metric (`--trials-metric`)."""
        self.study = study
        """A search's `optuna.Study` (every trial it holds, with its state and intermediate values); None for a grid."""

    @property
    def best(self) -> TrialOutcome | None:
        """The best trial by the compared metric, pruned trials left out (None: no trial reported it); its values are
        `best.trial.values`."""
        row = self.comparison.best
        return None if row is None else next(outcome for outcome in self.trials if outcome.trial.number == row.trial.number)

    @property
    def values(self) -> list[Any]:
        """Each trial's result (its cell's last line, or the function's return value), None where it has none."""
        return [None if result is None else result.value for result in map(came_back, self.trials)]

    @property
    def failed(self) -> list[TrialOutcome]:
        """The trials that failed (an error in the cell, a worker that died), each with its `error`."""
        return [outcome for outcome in self.trials if outcome.status == "failed"]

    def metrics_frame(self) -> Any:
        """Every trial's reported metrics as one pandas DataFrame, a row per trial and step (needs pandas)."""
        import pandas

        rows = [{"trial": o.trial.number, **dict(o.trial.values), **dict(row)} for o in self.trials for row in o.metrics]
        return pandas.DataFrame(rows)

    def __repr__(self) -> str:
        return self.comparison.text()

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(self.comparison.text())}</pre>"


def hand_back_sweep(result: SweepResult, held: HeldReturns, namespace: dict[str, Any], write: Write = write_to_sys) -> None:
    """`--return NAME`: NAME becomes the list of every trial's value (None for a trial without it); a module of the notebook's
    comes back as a copy per trial with that trial's weights. `--return-best NAME`: the best trial's, as one run's `--return`.
    What `held` kept is let go as it is handed over: the notebook holds it then, once. A name the best trial never defined,
    or a part no place could hold, is `NotReturned` once everything else is set, as for one run."""
    every: dict[str, list[Any]] = {name: [] for name in held.every}
    for outcome in result.trials:
        returned = held.returned_by(outcome.trial.number)
        for name, values in every.items():
            values.append(_trial_value(returned.get(name), namespace.get(name)))
        del returned  # a trial's weights, loaded into its module copy: not kept twice
    namespace.update(every)
    problems = _lost(result, held.every, "--return")
    if held.best:
        problems += _hand_back_best(result, held, namespace, write)
    if problems:
        raise NotReturned("\n".join(problems) + "\nEverything else was returned.")


def _hand_back_best(result: SweepResult, held: HeldReturns, namespace: dict[str, Any], write: Write) -> list[str]:
    """Set the best trial's `--return-best` values; what did not come back of them, to say."""
    names, metric = " ".join(held.best), result.comparison.metric.name
    ranked_first, back = result.comparison.best, held.best_back()
    passed_over = ""
    if ranked_first is not None and (back is None or back.trial.number != ranked_first.trial.number):
        passed_over = f"the best by {metric}, trial #{ranked_first.trial.number} ({ranked_first.trial.label}), {ranked_first.status}: its values did not come back"
    if back is None:
        why = f"{passed_over}, and no trial whose values did reported {metric}" if passed_over else f"no trial reported {metric}"
        write("stderr", f"tpu_nb: --return-best {names}: {why}; nothing was set.\n")
        return []
    if back.result is None:  # let go for a trial that looked better, whose results then could not be loaded
        write(
            "stderr",
            f"tpu_nb: --return-best {names}: the values of trial #{back.trial.number} ({back.trial.label}), the best whose values "
            "came back, were not kept (a trial that looked better could not be loaded); nothing was set.\n",
        )
        return []
    if passed_over:
        write("stderr", f"tpu_nb: --return-best: {passed_over}; the best of those whose values did is taken.\n")
    ranked = back.result
    only_best = RankResult(ranked.value, ranked.has_value, {name: ranked.returned[name] for name in held.best if name in ranked.returned})
    applied = apply_returns(only_best, namespace)
    report_returns(dataclasses.replace(applied, not_transferable=()), write)  # what it updated; its problems are said below
    trial = f"trial #{back.trial.number} ({back.trial.label})"
    write("stdout", f"tpu_nb: --return-best: {', '.join(held.best)} from {trial}.\n")
    return [
        *(
            f"--return-best {name}: the cell did not define `{name}` on rank 0 of {trial}, the best."
            for name in held.best
            if name in ranked.missing
        ),
        *(f"--return-best {detail}" for detail in applied.not_transferable),
        *(f"--return-best, {trial}: {lost.explain()}" for lost in ranked.lost if lost.what in _parts(held.best)),
    ]


def _lost(result: SweepResult, names: Sequence[str], option: str) -> list[str]:
    """The parts of `names` that no place could hold, trial by trial (their values are None in the lists)."""
    problems = []
    for outcome in result.trials:
        came = came_back(outcome)
        for lost in () if came is None else came.lost:
            if lost.what in _parts(names):
                problems.append(f"{option}, trial #{outcome.trial.number} ({outcome.trial.label}): {lost.explain()}")
    return problems


def _parts(names: Sequence[str]) -> set[str]:
    """The `--return` names as a lost part names itself (`Lost.what`)."""
    return {f"`{name}`" for name in names}


def _trial_value(value: Any, in_notebook: Any) -> Any:
    if value is None or isinstance(value, NotTransferable):
        return None
    if isinstance(value, ModuleWeights) and is_module(in_notebook):
        module = copy.deepcopy(in_notebook)
        added = adapters_to_add(module, value.adapters)
        if added:
            add_adapters(module, added)  # the trial's Trainer gave its copy LoRA adapters (peft_config)
        module.load_state_dict(value.state_dict)
        return module
    return value
