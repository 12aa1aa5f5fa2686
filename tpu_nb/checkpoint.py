"""`tpu_nb.checkpoint`: checkpoints of a hand-written loop, under `%%tpu_train --checkpoint DIR` or `launch(checkpoint=DIR)`.

    start = tpu_nb.checkpoint.track(model=model, optimizer=optimizer, scheduler=scheduler)
    for step, batch in enumerate(tpu_nb.checkpoint.skip(loader, start), start=start):
        ...
        report(step=step, loss=loss)   # saves every --every, and when the run stops

`track` names what each checkpoint keeps (anything with `state_dict()` and
`load_state_dict()`, checked when called; the RNG states and the step are
kept too) and returns
the step to start from: 0, or, with `--resume`, the step after the newest
verified checkpoint, whose state it has restored. Without `--checkpoint`, or
outside a worker, it does nothing and returns 0. A Trainer needs none of
this: tpu_nb checkpoints it through its own checkpointing.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def track(**objects: Any) -> int:
    """Keep these in every checkpoint (`model=` is checked against the checkpoint it resumes from); the step to start from.

    Each must have `state_dict()` and `load_state_dict()`, or `TypeError` says which does not, at once (not at the first save).
    """
    _check_trackable(objects)
    from tpu_nb.workers.cell_api import reporting

    reporter = reporting.current()
    if reporter is None or reporter.checkpointer is None:
        return 0
    return reporter.checkpointer.track(objects, reporter.rank)


def _check_trackable(objects: dict[str, Any]) -> None:
    if not objects:
        raise TypeError(
            "tpu_nb.checkpoint.track(): name what each checkpoint keeps, e.g. track(model=model, optimizer=optimizer, scheduler=scheduler)."
        )
    for name, value in objects.items():
        lacking = [method for method in ("state_dict", "load_state_dict") if not callable(getattr(value, method, None))]
        if not lacking:
            continue
        kind = type(value).__name__
        article = "an" if kind[:1].lower() in "aeiou" else "a"
        said = f"tpu_nb.checkpoint.track({name}=...): {article} {kind} has no {' or '.join(f'{method}()' for method in lacking)}"
        said += ", so a checkpoint could neither save nor restore it. Pass objects that have both: a model, an optimizer, a scheduler"
        said += " (or anything with state_dict()/load_state_dict())."
        if kind == "DataLoader" or hasattr(value, "batch_size"):
            said += f" A loader is not saved: iterate tpu_nb.checkpoint.skip({name}, start) to continue where the data left off."
        raise TypeError(said)


def skip(batches: Iterable[T], steps: int) -> Iterator[T]:
    """`batches` from the one after the first `steps`: where a resumed run's data left off.

    A DataLoader cannot seek, so the skipped batches are read and dropped
    (said once on the dashboard); give it the same order as the first run
    (a seeded generator or sampler), or the data differs.
    """
    if steps:
        from tpu_nb.workers.cell_api import reporting

        reporter = reporting.current()
        if reporter is not None:
            reporter.notice(f"resumed at step {steps}: its first {steps} batches were read and dropped (a loader cannot seek)")
    return itertools.islice(iter(batches), steps, None)
