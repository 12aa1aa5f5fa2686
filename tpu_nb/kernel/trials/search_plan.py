"""`--trials STUDY --n-trials N --space SPACE`: a search, told apart from a grid and checked before anything starts.

Optuna is an optional extra, imported only once a search is asked for: a
value is a study only if Optuna is already imported (the user made the
study with it), so telling a grid or k-fold apart never loads it; a search
asked for without Optuna installed is refused with the line that installs it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tpu_nb.kernel.trials.comparison import MetricChoice

INSTALL = "pip install 'tpu_nb[search]'"
DEFAULT_METRIC = "loss"
SPACE_EXAMPLE = "def space(trial): return {'lr': trial.suggest_float('lr', 1e-5, 1e-3, log=True)}"


class SearchError(ValueError):
    """A search that cannot run as asked: the message says the fix."""


@dataclass(frozen=True, slots=True)
class SearchPlan:
    """A search: the user's study, the space its trials' values come from, how many trials, and the metric it is told."""

    study: Any
    """The user's `optuna.Study`: it chooses the trials and keeps every one's state, intermediate values and value."""
    space: Callable[[Any], Mapping[str, Any]]
    n_trials: int
    metric: MetricChoice


def search_asked(trials: Any, n_trials: int | None, space: Any, namespace: Mapping[str, Any] | None = None) -> bool:
    """Whether the options ask for a search (a study given, or a search's own options), not a grid or k-fold."""
    return n_trials is not None or space is not None or is_study(_named(trials, namespace))


def is_study(value: Any) -> bool:
    """An `optuna.Study`, told without importing Optuna: none can exist unless the notebook imported it."""
    optuna = sys.modules.get("optuna")
    return optuna is not None and isinstance(value, optuna.Study)


def plan_search(
    trials: Any, n_trials: int | None, space: Any, metric: MetricChoice | None, namespace: Mapping[str, Any] | None = None
) -> SearchPlan:
    """The search the options ask for (Optuna imported now, as one is asked for); `SearchError` with the fix."""
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise SearchError(
            f"--trials with --n-trials and --space is a search with Optuna, which is not installed here: {INSTALL} (or pip "
            "install optuna), then make its study: study = tpu_nb.study('my-search')."
        ) from None
    study = _named(trials, namespace)
    if not is_study(study):
        shown = trials if isinstance(trials, str) else type(trials).__name__
        raise SearchError(
            f"--n-trials and --space are for a search: --trials {shown} is not an optuna.Study; give the name of one "
            "(study = tpu_nb.study('my-search'), or optuna.create_study(...)), or leave them out for a grid."
        )
    if n_trials is None or space is None:
        raise SearchError(
            f"--trials {_spelled(trials)} is a study: say how many trials to run, --n-trials N, and the space each one's values "
            f"come from, --space SPACE ({SPACE_EXAMPLE})."
        )
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise SearchError(f"--n-trials {n_trials}: give how many trials the search runs, 1 or more.")
    return SearchPlan(study, _space(space, namespace), n_trials, _metric(study, metric))


def _space(space: Any, namespace: Mapping[str, Any] | None) -> Callable[[Any], Mapping[str, Any]]:
    if isinstance(space, str) and namespace is not None and _name(space) not in namespace:
        raise SearchError(f"--space {space}: the notebook defines no such name; define the space first, e.g. {SPACE_EXAMPLE}.")
    found = _named(space, namespace)
    if not callable(found):
        raise SearchError(
            f"--space {_spelled(space)} is a {type(found).__name__}: give a function of an optuna.Trial that returns the trial's "
            f"values, e.g. {SPACE_EXAMPLE}."
        )
    return found  # type: ignore[no-any-return]


def _metric(study: Any, metric: MetricChoice | None) -> MetricChoice:
    """The metric the study is told: `--trials-metric`'s (its direction must be the study's), else loss for a study that
    minimizes."""
    directions = [direction.name.lower() for direction in study.directions]
    if len(directions) != 1:
        raise SearchError(
            f"study {study.study_name!r} has {len(directions)} objectives: a search tells it one metric (--trials-metric); "
            "make the study with one direction."
        )
    maximizes = directions[0] == "maximize"
    if metric is None:
        if maximizes:
            raise SearchError(
                f"study {study.study_name!r} maximizes: name the metric it maximizes with --trials-metric (e.g. eval_accuracy)."
            )
        return MetricChoice(DEFAULT_METRIC, larger_is_better=False)
    if metric.larger_is_better != maximizes:
        flipped = "max" if maximizes else "min"
        raise SearchError(
            f"--trials-metric {metric.name}: {metric.describe}, but study {study.study_name!r} {directions[0]}s it: make the "
            f"study with direction={'maximize' if metric.larger_is_better else 'minimize'!r}, or write --trials-metric "
            f"{metric.name}:{flipped}."
        )
    return metric


def _named(value: Any, namespace: Mapping[str, Any] | None) -> Any:
    """The notebook's value of a name the magic was given (as written or quoted); anything else as it is."""
    if isinstance(value, str) and namespace is not None and _name(value) in namespace:
        return namespace[_name(value)]
    return value


def _name(text: str) -> str:
    return text.strip().strip("'\"")


def _spelled(value: Any) -> str:
    return value if isinstance(value, str) else type(value).__name__
