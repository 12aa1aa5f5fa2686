"""The comparison of a sweep's trials: sorted by the chosen metric, with mean and spread across folds, and each one's speed."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tpu_nb.kernel.history.log import smaller_is_better
from tpu_nb.kernel.trials.spec import FOLDS, Trial

UNRANKED = ("pruned", "pruned earlier")
"""Trials a search's pruner stopped early: their last value is an early step's, not their configuration's, so they are
listed after the ranked trials and are never the best (as Optuna's `best_trial` leaves them out)."""


class MetricError(ValueError):
    """`--trials-metric` cannot be read: the message says how to write it."""


@dataclass(frozen=True, slots=True)
class MetricChoice:
    """What the sweep's trials are compared by, and which way is better."""

    name: str
    larger_is_better: bool

    @classmethod
    def parse(cls, text: str) -> MetricChoice:
        """ "eval_accuracy" (better higher), "eval_loss" (better lower: a name with loss, error, ...), or "NAME:max" / "NAME:min"."""
        name, colon, direction = text.strip().partition(":")
        if not name or (colon and direction not in ("max", "min")):
            raise MetricError(f"--trials-metric {text!r}: give a metric the trials report, e.g. eval_accuracy, or eval_loss:min.")
        if colon:
            return cls(name, direction == "max")
        return cls(name, not smaller_is_better(name))

    @property
    def describe(self) -> str:
        return f"{self.name} ({'higher' if self.larger_is_better else 'lower'} is better)"


@dataclass(frozen=True, slots=True)
class TrialRow:
    """One trial's line in the comparison."""

    trial: Trial
    status: str
    """done, stopped, pruned, failed, not started (the sweep was stopped first), or done/pruned/failed earlier (before a
    resume)."""
    where: str | None
    """The chips it ran on."""
    final: Mapping[str, float]
    """The last value of every metric it reported."""
    seconds: float | None
    tokens_per_second: float | None = None
    """Its speed after warm-up (all its chips), where it counted tokens."""
    mfu: float | None = None

    def value(self, metric: MetricChoice) -> float | None:
        found = self.final.get(metric.name)
        return None if found is None or not math.isfinite(found) else found

    def rank_value(self, metric: MetricChoice) -> float | None:
        """The value it is ranked by: None for a trial that is not ranked (pruned) or did not report the metric."""
        return None if self.status in UNRANKED else self.value(metric)


@dataclass(frozen=True, slots=True)
class GroupRow:
    """The trials that differ only by fold: the metric's mean and spread (sample standard deviation) across their folds."""

    label: str
    folds: int
    counted: int
    """Folds that reported the metric."""
    mean: float | None
    spread: float | None


@dataclass(frozen=True, slots=True)
class Comparison:
    """The sweep's trials, best first by `metric`, and (for k-fold) each configuration's mean and spread, best first."""

    metric: MetricChoice
    rows: tuple[TrialRow, ...]
    groups: tuple[GroupRow, ...]

    @property
    def best(self) -> TrialRow | None:
        """The best trial that reported the metric (None: none did)."""
        first = self.rows[0] if self.rows else None
        return first if first is not None and first.rank_value(self.metric) is not None else None

    def text(self) -> str:
        """The comparison as plain text: what a terminal, a test and the notebook's text/plain show."""
        lines = [f"trials by {self.metric.describe}:"]
        for row in self.rows:
            value = row.value(self.metric)
            shown = "-" if value is None else f"{value:.6g}"
            where = f" on {row.where}" if row.where else ""
            speed = "" if row.tokens_per_second is None else f" {row.tokens_per_second:,.0f} tokens/s"
            speed += "" if row.mfu is None else f" MFU {row.mfu:.1%}"
            lines.append(f"  #{row.trial.number:<3} {row.trial.label:<32} {row.status:<11} {self.metric.name}={shown}{where}{speed}")
        if self.groups:
            lines.append(f"mean ± spread of {self.metric.name} across folds:")
            for group in self.groups:
                lines.append(f"  {group.label or 'all':<36} {_mean_text(group)} ({group.counted} of {group.folds} folds)")
        return "\n".join(lines)


def compare(rows: Sequence[TrialRow], metric: MetricChoice) -> Comparison:
    """`rows` best first by `metric` (pruned trials and those without it last, by number); k-fold groups with their mean and
    spread."""

    def order(row: TrialRow) -> tuple[int, float, int]:
        value = row.rank_value(metric)
        if value is None:
            return (1, 0.0, row.trial.number)
        return (0, -value if metric.larger_is_better else value, row.trial.number)

    ordered = tuple(sorted(rows, key=order))
    return Comparison(metric, ordered, _groups(rows, metric))


def default_metric(rows: Sequence[TrialRow]) -> MetricChoice:
    """Without --trials-metric: eval_loss if a trial reported it, else loss (lower is better)."""
    reported = {name for row in rows for name in row.final}
    return MetricChoice("eval_loss" if "eval_loss" in reported else "loss", larger_is_better=False)


def _groups(rows: Sequence[TrialRow], metric: MetricChoice) -> tuple[GroupRow, ...]:
    """For k-fold trials: one group per configuration (the values besides the fold), best mean first."""
    folded = [row for row in rows if FOLDS in row.trial.values]
    if not folded:
        return ()
    by_label: dict[str, list[TrialRow]] = {}
    for row in folded:
        key = " ".join(f"{name}={value!r}" for name, value in row.trial.values.items() if name not in ("fold", FOLDS))
        by_label.setdefault(key, []).append(row)
    groups = []
    for label, members in by_label.items():
        values = [value for value in (row.value(metric) for row in members) if value is not None]
        mean = statistics.fmean(values) if values else None
        spread = statistics.stdev(values) if len(values) > 1 else None
        groups.append(GroupRow(label, int(members[0].trial.values[FOLDS]), len(values), mean, spread))
    sign = -1.0 if metric.larger_is_better else 1.0
    return tuple(sorted(groups, key=lambda group: (group.mean is None, sign * (group.mean or 0.0))))


def _mean_text(group: GroupRow) -> str:
    if group.mean is None:
        return "-"
    return f"{group.mean:.6g}" + ("" if group.spread is None else f" ± {group.spread:.3g}")
