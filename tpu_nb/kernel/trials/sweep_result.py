"""What a sweep hands back: every trial's outcome and value, the comparison, and the best trial's `--return-best` values."""

from __future__ import annotations

import copy
import html
from collections.abc import Sequence
from typing import Any

from tpu_nb.kernel.notebook.cell_output import Write, write_to_sys
from tpu_nb.kernel.notebook.returns import apply_returns, report_returns
from tpu_nb.kernel.trials.comparison import Comparison
from tpu_nb.kernel.trials.sweep import TrialOutcome
from tpu_nb.wire.results import ModuleWeights, NotTransferable, RankResult
from tpu_nb.workers.programs import is_module


class SweepResult:
    """A sweep's trials, in trial order, and their comparison (shown as the cell's result)."""

    def __init__(self, outcomes: Sequence[TrialOutcome], comparison: Comparison) -> None:
        self.trials = tuple(outcomes)
        """Each trial's `TrialOutcome`: trial (its number and values), status, where, ending, metrics, final."""
        self.comparison = comparison

    @property
    def best(self) -> TrialOutcome | None:
        """The best trial by the compared metric (None: no trial reported it)."""
        row = self.comparison.best
        return None if row is None else self.trials[row.trial.number]

    @property
    def values(self) -> list[Any]:
        """Each trial's result (its cell's last line, or the function's return value), None where it has none."""
        return [None if result is None else result.value for result in map(_result, self.trials)]

    @property
    def failed(self) -> list[TrialOutcome]:
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


def hand_back_sweep(
    result: SweepResult, namespace: dict[str, Any], returns: Sequence[str], best: Sequence[str], write: Write = write_to_sys
) -> None:
    """`--return NAME`: NAME becomes the list of every trial's value (None for a trial without it); a module of the notebook's
    comes back as a copy per trial with that trial's weights. `--return-best NAME`: the best trial's, as one run's `--return`."""
    for name in returns:
        namespace[name] = [_trial_value(outcome, name, namespace.get(name)) for outcome in result.trials]
    if best:
        chosen = result.best
        if chosen is None:
            write(
                "stderr", f"tpu_nb: --return-best {' '.join(best)}: no trial reported {result.comparison.metric.name}; nothing was set.\n"
            )
            return
        ranked = _result(chosen)
        assert ranked is not None, "the best trial reported its metric, so it ran"
        only_best = RankResult(ranked.value, ranked.has_value, {name: ranked.returned[name] for name in best if name in ranked.returned})
        problem = report_returns(apply_returns(only_best, namespace), write)
        write("stdout", f"tpu_nb: --return-best: {', '.join(best)} from trial #{chosen.trial.number} ({chosen.trial.label}).\n")
        if problem is not None:
            raise problem


def _result(outcome: TrialOutcome) -> RankResult | None:
    ending = outcome.ending
    if ending is None or ending.error is not None or 0 not in ending.results:
        return None
    return ending.results[0]


def _trial_value(outcome: TrialOutcome, name: str, in_notebook: Any) -> Any:
    result = _result(outcome)
    if result is None or name not in result.returned:
        return None
    value = result.returned[name]
    if isinstance(value, NotTransferable):
        return None
    if isinstance(value, ModuleWeights) and is_module(in_notebook):
        module = copy.deepcopy(in_notebook)
        module.load_state_dict(value.state_dict)
        return module
    return value
