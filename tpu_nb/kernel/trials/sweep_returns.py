"""A sweep's `--return` values, kept apart from its outcomes and loaded only where they come back.

The sweep's result is the cell's value, so IPython's `Out` keeps it for the
rest of the session: it holds no returned values. They are kept here until
`hand_back_sweep` puts them in the notebook, then let go:
- `--return NAME`: every trial's, as the user asked;
- `--return-best NAME`: only the best trial's so far. When a trial's results
  come back, the comparison so far (`compare`, with the metric it would
  choose now) says whether it is the new best: only then are its values
  loaded, and the previous best's are let go first (a trial a search's
  pruner stopped is never the best). So the kernel holds at most one
  trial's at a time, whatever the number of trials
  (`benchmarks/sweep_return_memory.py`). The choice is the final
  comparison's: with a given metric the best of a growing set is kept
  step by step; without one, the metric changes at most once, from loss to
  eval_loss, when the first trial reporting eval_loss ends, and no trial
  before it can be best by eval_loss.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from tpu_nb.kernel.trials.comparison import MetricChoice, TrialRow, compare, default_metric
from tpu_nb.kernel.trials.spec import Trial
from tpu_nb.kernel.trials.sweep import TrialOutcome
from tpu_nb.wire.results import RankResult


@dataclass(frozen=True, slots=True)
class BestBack:
    """The trial `--return-best` takes: the best of those whose results came back, and its values (None if not kept)."""

    trial: Trial
    result: RankResult | None


class HeldReturns:
    """What a sweep keeps of its trials' `--return` (`every`) and `--return-best` (`best`) values until they are handed back."""

    def __init__(self, every: Sequence[str], best: Sequence[str], metric: MetricChoice | None, earlier: Sequence[TrialRow]) -> None:
        self.every = tuple(every)
        self.best = tuple(best)
        self._metric = metric
        self._rows: dict[int, TrialRow] = {row.trial.number: row for row in earlier}  # every trial's, for the metric's default
        self._came_back: dict[int, TrialRow] = {}  # those whose results came back: --return-best's candidates
        self._each: dict[int, Mapping[str, Any]] = {}  # --return values by trial
        self._best: tuple[int, RankResult] | None = None
        self._loading_best: int | None = None

    def to_load(self, trial: Trial, final: Mapping[str, float], status: str = "done") -> Collection[str]:
        """Trial `trial`'s results came back (it reported `final`, it ends `status`): the `--return` names to load."""
        names = set(self.every)
        row = TrialRow(trial, status, None, final, None)
        if self.best and self._best_of([*self._came_back.values(), row], [*self._rows.values(), row]) == trial.number:
            self._best, self._loading_best = None, trial.number  # the previous best let go before this one loads
            names.update(self.best)
        return names

    def take(self, outcome: TrialOutcome) -> TrialOutcome:
        """Keep what the ended trial returned that is wanted; its outcome without any returned value."""
        number = outcome.trial.number
        row = TrialRow(outcome.trial, outcome.status, outcome.where, outcome.final, outcome.seconds)
        self._rows[number] = row
        result = came_back(outcome)
        if result is not None:
            self._came_back[number] = row
            if self.every:
                self._each[number] = MappingProxyType({name: result.returned[name] for name in self.every if name in result.returned})
            if self._loading_best == number:
                self._best = (number, result)
        self._loading_best = None
        if self._best is not None and self._best_of(list(self._came_back.values()), list(self._rows.values())) != self._best[0]:
            self._best = None  # the metric changed (eval_loss came): it is not the best any more
        if result is None or not result.returned:
            return outcome
        assert outcome.ending is not None
        results = {rank: dataclasses.replace(found, returned=MappingProxyType({})) for rank, found in outcome.ending.results.items()}
        return dataclasses.replace(outcome, ending=dataclasses.replace(outcome.ending, results=MappingProxyType(results)))

    def returned_by(self, number: int) -> Mapping[str, Any]:
        """Trial `number`'s `--return` values, let go here (the caller holds them now)."""
        return self._each.pop(number, MappingProxyType({}))

    def best_back(self) -> BestBack | None:
        """The best trial whose results came back, and its `--return-best` values; let go here."""
        number = self._best_of(list(self._came_back.values()), list(self._rows.values()))
        if number is None:
            return None
        kept = self._best[1] if self._best is not None and self._best[0] == number else None
        self._best = None
        return BestBack(self._came_back[number].trial, kept)

    def _best_of(self, candidates: Sequence[TrialRow], rows: Sequence[TrialRow]) -> int | None:
        best = compare(candidates, self._metric or default_metric(rows)).best
        return None if best is None else best.trial.number


def came_back(outcome: TrialOutcome) -> RankResult | None:
    """Rank 0's result, when the trial's results came back (it finished, or was stopped at a step)."""
    ending = outcome.ending
    if ending is None or ending.error is not None or 0 not in ending.results:
        return None
    return ending.results[0]
