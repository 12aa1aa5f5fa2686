"""Checkpoints from the notebook's side: the plan the workers follow, from the options as typed, and the listing.

`--checkpoint DIR [--every 15m|500steps] [--keep 2] [--budget 15GB] [--resume [DIR]]`
become a `CheckpointPlan` (followed by `tpu_nb.workers.checkpoints.saving`);
`--resume` is resolved here, to the newest verified checkpoint, so a run
that cannot resume is refused before anything starts.
"""

from __future__ import annotations

import html

from tpu_nb.basics.locations import local_path
from tpu_nb.basics.units import UnitError, format_bytes, parse_size
from tpu_nb.kernel.endings.notebook_errors import refused
from tpu_nb.kernel.planning.declared_options import OPTION_NAMED
from tpu_nb.wire.checkpoints import (
    CheckpointError,
    CheckpointPlan,
    Every,
    list_checkpoints,
    newest_verified,
)

KAGGLE_OUTPUT = "/kaggle/working"
KAGGLE_BUDGET = 15 * 10**9
"""Checkpoints under /kaggle/working take at most this much by default: Kaggle keeps 20 GB there, the rest is the user's."""


def plan_checkpoints(
    checkpoint: str | None, every: str | None, keep: int, resume: str | bool | None, budget: str | None = None
) -> CheckpointPlan | None:
    """The workers' checkpoint plan from the options as typed; `LaunchRefused` with every problem and its fix."""
    directory = checkpoint if checkpoint is not None else resume if isinstance(resume, str) and resume else None
    problems = []
    if directory is None:
        for given, option in ((every, "--every"), (resume, "--resume"), (budget, "--budget")):
            if given and given != OPTION_NAMED[option.removeprefix("--")].default:
                problems.append(f"{option} needs --checkpoint DIR: where the run's checkpoints go (and come from).")
        if keep != OPTION_NAMED["keep"].default:
            problems.append("--keep needs --checkpoint DIR.")
        _refuse_if(problems)
        return None
    try:
        cadence = Every.parse(every or OPTION_NAMED["every"].default)
    except (CheckpointError, UnitError) as error:
        problems.append(str(error))
        cadence = Every()
    if keep < 1:
        problems.append(f"--keep {keep}: keep at least 1 checkpoint (the newest verified one is what a resume needs).")
    try:
        bytes_allowed = _default_budget(directory) if budget is None else parse_size(budget, "--budget")
    except UnitError as error:
        problems.append(str(error))
        bytes_allowed = None
    resume_from: str | None = None
    passed_over: tuple[str, ...] = ()
    source = resume if isinstance(resume, str) and resume else directory
    if not resume or source != directory:
        problems += _earlier_run(directory)
    if resume:
        newest = newest_verified(source)
        if newest is None:
            problems.append(_nothing_to_resume(source))
        else:
            resume_from = newest.path
            passed_over = tuple(
                f"{found.path.rsplit('/', 1)[-1]}: {found.state}" for found in list_checkpoints(source) if found.step > newest.step
            )
    _refuse_if(problems)
    return CheckpointPlan(directory, cadence, keep, resume_from, passed_over, bytes_allowed)


def _default_budget(directory: str) -> int | None:
    """On Kaggle, checkpoints in its output directory stay within KAGGLE_BUDGET; elsewhere, only --keep counts."""
    inside = local_path(directory).rstrip("/")
    return KAGGLE_BUDGET if inside == KAGGLE_OUTPUT or inside.startswith(KAGGLE_OUTPUT + "/") else None


def describe_checkpoints(directory: str) -> tuple[str, str]:
    """What `%tpu_checkpoints` shows: (text, HTML) listing each checkpoint's step, time, loss, size and state."""
    found = list_checkpoints(directory)
    if not found:
        text = f"{directory}: no checkpoints"
        return text, f"<p>{html.escape(text)}</p>"
    rows = []
    for checkpoint in found:
        record = checkpoint.record
        rows.append(
            (
                str(checkpoint.step),
                record.saved_at.replace("T", " ")[:16] if record else "",
                "" if record is None or record.loss is None else f"{record.loss:.4g}",
                "" if record is None else format_bytes(record.size),
                "" if record is None else f"{record.seconds:.1f}s",
                checkpoint.state,
            )
        )
    header = ("step", "saved (UTC)", "loss", "size", "took", "state")
    widths = [max(len(row[column]) for row in (header, *rows)) for column in range(len(header))]
    text = "\n".join(
        [directory, *("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in (header, *rows))]
    )
    cells = "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    markup = f"<p><b>{html.escape(directory)}</b></p><table><tr>" + "".join(f"<th>{name}</th>" for name in header) + f"</tr>{cells}</table>"
    return text, markup


def _earlier_run(directory: str) -> list[str]:
    """A fresh run into a directory holding another run's checkpoints would mix the two: a resume could take either."""
    found = list_checkpoints(directory)
    if not found:
        return []
    return [
        f"--checkpoint {directory} holds checkpoints of an earlier run (the newest at step {found[-1].step}): add --resume to "
        "continue it, or give another directory (or delete its checkpoint-* folders) to start over."
    ]


def _nothing_to_resume(directory: str) -> str:
    found = list_checkpoints(directory)
    if not found:
        return f"--resume: {directory} holds no checkpoint; start without --resume, or point it at the run's --checkpoint directory."
    listed = "; ".join(f"{checkpoint.path.rsplit('/', 1)[-1]}: {checkpoint.state}" for checkpoint in found[-3:])
    return f"--resume: {directory} holds no verified checkpoint ({listed}); start without --resume."


def _refuse_if(problems: list[str]) -> None:
    if problems:
        raise refused(problems)
