"""`--trials SPEC`: the trials of a sweep, read from what the user wrote.

Three ways to say them:
- `folds=5`: k-fold cross-validation, trials {"fold": 0, "folds": 5} to {"fold": 4, "folds": 5};
- `"lr=1e-5,3e-5 seed=0,1"`: a grid, every combination of the values (the last name varies fastest);
- a list of dicts (in Python, or a notebook name holding one in the magic): those trials, in that order.
"""

from __future__ import annotations

import ast
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

FOLDS = "folds"
MOST_TRIALS = 1000
"""More than this many trials is a typo in a grid, not a sweep a notebook runs."""


class TrialSpecError(ValueError):
    """A trial spec that cannot be read: the message says what to write instead."""


@dataclass(frozen=True, slots=True)
class Trial:
    """One trial: its number in the sweep (from 0) and the values its cell gets as `trial`."""

    number: int
    values: Mapping[str, Any]
    continues: int | None = None
    """A search's trial that runs an unfinished earlier one again (`search.py`): the number of the first of them, whose
    checkpoint directory it continues; None for every other trial."""

    @property
    def label(self) -> str:
        """The trial's values as the user wrote them, for rows and messages: "lr=3e-05 seed=1", "fold 2/5"."""
        values = dict(self.values)
        if set(values) >= {"fold", FOLDS}:
            rest = " ".join(f"{name}={value!r}" for name, value in values.items() if name not in ("fold", FOLDS))
            return f"fold {values['fold'] + 1}/{values[FOLDS]}" + (f" {rest}" if rest else "")
        return " ".join(f"{name}={value!r}" for name, value in values.items()) or f"trial {self.number}"


def parse_trials(spec: str | int | Sequence[Mapping[str, Any]], namespace: Mapping[str, Any] | None = None) -> tuple[Trial, ...]:
    """The trials `spec` names (`namespace`: where a name in the magic is looked up); `TrialSpecError` says the fix."""
    if isinstance(spec, int) and not isinstance(spec, bool):
        raise TrialSpecError(f"trials={spec}: say what varies: folds={spec} for k-fold, or a grid such as 'lr=1e-5,3e-5 seed=0,1'.")
    if isinstance(spec, str):
        text = _unquoted(spec.strip())
        if text.isidentifier() and namespace is not None and text in namespace:
            return _listed(namespace[text], f"`{text}`")
        return _written(text)
    return _listed(spec, "trials")


def _written(text: str) -> tuple[Trial, ...]:
    if not text:
        raise TrialSpecError("--trials: give folds=K, a grid such as 'lr=1e-5,3e-5 seed=0,1', or the name of a list of dicts.")
    axes: dict[str, list[Any]] = {}
    for part in text.split():
        name, equals, values = part.partition("=")
        if not equals or not name.isidentifier() or not values:
            raise TrialSpecError(
                f"--trials: {part!r} is not NAME=VALUE[,VALUE...]: write e.g. 'lr=1e-5,3e-5 seed=0,1', folds=5, or the name "
                "of a list of dicts defined in the notebook."
            )
        if name in axes:
            raise TrialSpecError(f"--trials: {name} is given twice: list all its values once, {name}=A,B,C.")
        axes[name] = [_value(item) for item in values.split(",") if item]
        if not axes[name] and name != FOLDS:  # folds=K says its own fix
            raise TrialSpecError(f"--trials: {name}= has no values (a sweep of no trials): give them, {name}=A,B, or leave {name} out.")
    if FOLDS in axes:
        return _folds(axes)
    _check_count(math.prod(map(len, axes.values())))
    combinations = itertools.product(*axes.values())
    return tuple(Trial(number, MappingProxyType(dict(zip(axes, values, strict=True)))) for number, values in enumerate(combinations))


def _folds(axes: dict[str, list[Any]]) -> tuple[Trial, ...]:
    """folds=K, alone or with a grid: every fold of every combination."""
    counts = axes.pop(FOLDS)
    if len(counts) != 1 or not isinstance(counts[0], int) or isinstance(counts[0], bool) or counts[0] < 2:
        raise TrialSpecError(f"--trials folds={','.join(map(str, counts))}: give one whole number of folds, 2 or more (folds=5).")
    folds = counts[0]
    _check_count(math.prod(map(len, axes.values())) * folds)
    combinations = itertools.product(*axes.values())
    trials: list[Trial] = []
    for values in combinations:
        for fold in range(folds):
            trials.append(Trial(len(trials), MappingProxyType({**dict(zip(axes, values, strict=True)), "fold": fold, FOLDS: folds})))
    return tuple(trials)


def _listed(value: Any, where: str) -> tuple[Trial, ...]:
    if isinstance(value, Mapping) or isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise TrialSpecError(f"--trials {where}: give a list of dicts, one per trial (e.g. [{{'lr': 1e-5}}, {{'lr': 3e-5}}]).")
    trials = []
    for number, values in enumerate(value):
        if not isinstance(values, Mapping) or not all(isinstance(name, str) for name in values):
            raise TrialSpecError(f"--trials {where}: item {number} is a {type(values).__name__}; each trial is a dict with str keys.")
        trials.append(Trial(number, MappingProxyType(dict(values))))
    if not trials:
        raise TrialSpecError(f"--trials {where}: the list is empty; give at least one trial.")
    _check_count(len(trials))
    return tuple(trials)


def _unquoted(text: str) -> str:
    """The spec without the quotes around it: IPython's magics keep them (`--trials "lr=1e-5,3e-5 seed=0,1"`)."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1].strip()
    return text


def _value(text: str) -> Any:
    """A value as Python reads it (1e-5, 3, True, 'adam'); anything else stays the text written (adam)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _check_count(count: int) -> None:
    """Counted before any trial is built: a typo of nine axes would otherwise build a million first."""
    if count > MOST_TRIALS:
        raise TrialSpecError(f"--trials: that makes {count} trials (more than {MOST_TRIALS}); give fewer values.")
