"""`tpu_nb.launch`: run a function on every XLA device from Python, in the foreground or in the background."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tpu_nb.kernel.endings.notebook_errors import NotReturned
from tpu_nb.kernel.endings.run_ending import Ending
from tpu_nb.kernel.notebook.cell_output import Write, write_to_sys
from tpu_nb.kernel.notebook.returns import Handback
from tpu_nb.kernel.planning.declared_options import check_keywords, given
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.run.background import BackgroundRun, start_in_background
from tpu_nb.kernel.run.followed_run import RunObserver, run_in_foreground
from tpu_nb.kernel.run.local_run import Run
from tpu_nb.kernel.trials.sweep_start import check_sweep_options, plan_sweep, run_sweep
from tpu_nb.wire.results import NotTransferable, RankResult
from tpu_nb.workers.processes.programs import FunctionProgram


def launch(fn: Callable[..., Any], *args: Any, **options: Any) -> Any:
    """`tpu_nb.launch`'s work (its options: `declared_options`, shown by `help(tpu_nb.launch)`)."""
    return launch_observed(fn, args, options)


def launch_observed(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    options: dict[str, Any],
    observers: Sequence[RunObserver] = (),
    write: Write = write_to_sys,
) -> Any:
    """`launch`, with `observers` given every event of the run and what it prints sent to `write` (the selftest reads both)."""
    check_keywords("launch", "launch", options)
    background = bool(options.get("background", False))
    name = str(getattr(fn, "__name__", "run"))
    title = f"tpu_nb.launch({name})"
    check_sweep_options(options)
    sweep = given("launch", "sweep", options)
    if sweep["trials"] is not None:  # before the run's options: a sweep's checkpoints are planned per trial
        plan = plan_sweep(sweep["trials"], sweep["cores_per_trial"], sweep["trials_metric"], None, sweep["n_trials"], sweep["space"])
        result, _ = run_sweep(
            plan, lambda trial: FunctionProgram(fn, args, {"trial": dict(trial.values)}), given("launch", "run", options), title, write
        )
        return result
    run_options = LaunchOptions.from_user(**given("launch", "run", options))
    program = FunctionProgram(fn, args)

    def value_of(ending: Ending) -> Any:
        problems = [problem for rank in sorted(ending.results) for problem in _not_returned(rank, ending.results[rank])]
        if problems:
            raise NotReturned("\n".join(problems))
        if run_options.all_results:
            return [ending.results[rank].value for rank in sorted(ending.results)]
        return ending.results[0].value

    if background:

        def finish(ending: Ending, write: Write) -> Handback:
            return Handback(value_of(ending))

        handle: BackgroundRun = start_in_background(program, run_options, name, finish, observers)
        return handle
    ending = run_in_foreground(Run(program, run_options, title, observers, write))
    if ending.error is not None:
        raise ending.error
    return value_of(ending)


def _not_returned(rank: int, result: RankResult) -> list[str]:
    """Why rank `rank`'s return value did not come back, if it did not: never a stand-in in its place."""
    problems = [f"rank {rank}: {lost.explain()}" for lost in result.lost]
    if isinstance(result.value, NotTransferable):
        problems.append(
            f"rank {rank}: the function returned a {result.value.type_name}, which cannot be sent back from the worker "
            f"({result.value.reason}): return plain values, tensors or modules instead."
        )
    return problems
