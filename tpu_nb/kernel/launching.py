"""`tpu_nb.launch`: run a function on every XLA device from Python, in the foreground or in the background."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError

from tpu_nb.kernel.endings.run_ending import Ending
from tpu_nb.kernel.notebook.cell_output import Write
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.run.background import BackgroundRun, Handback, start_in_background
from tpu_nb.kernel.run.followed_run import run_in_foreground
from tpu_nb.kernel.run.local_run import Run
from tpu_nb.wire.results import NotTransferable, RankResult
from tpu_nb.workers.programs import FunctionProgram


def launch(
    fn: Callable[..., Any],
    *args: Any,
    cores: int | None = None,
    timeout: float | None = None,
    all_ranks_output: bool = False,
    progress: bool = True,
    all_results: bool = False,
    stop_grace: float = 5.0,
    background: bool = False,
    spmd: bool = False,
    mesh: str | None = None,
    doctor: bool = True,
    compile_cache: str | None = None,
    checkpoint: str | None = None,
    every: str | None = None,
    keep: int = 2,
    budget: str | None = None,
    resume: str | bool | None = None,
    deadline: str | None = None,
    watchdog: str | float | None = None,
    stack: str | None = None,
    mode: str | None = None,
) -> Any:
    """Run `fn(*args)` in a worker per XLA device (forked: no pickling) and return rank 0's result.

    With `all_results=True`, return every rank's result as a list by rank.
    With `background=True`, return at once a `BackgroundRun` handle (`status`,
    `wait()`, `stop()`, `kill()`, `metrics`, `result`), with the same
    dashboard and Stop/Kill buttons as `%%tpu_train --background`.
    An interrupt stops gracefully: `report(...)` raises `StopTraining` in
    `fn` at the next step every rank reaches (waiting as long as two of the
    run's longest steps take, a compilation, evaluation or save in progress
    too, at least `stop_grace` seconds; else every worker is terminated); a
    second interrupt stops at once.
    With `spmd=True`, one worker drives every device (SPMD) and `fn` can
    shard its model and batches over the global mesh (`tpu_nb.spmd`);
    `mesh="fsdp=4,tensor=2"` chooses the mesh (default: every device on fsdp).
    `doctor=False` turns the XLA doctor off; `compile_cache="DIR"` keeps XLA's
    compiled programs in DIR across runs ("off": none; default: a working
    directory on Colab's and Kaggle's TPUs). `checkpoint="DIR"` saves what
    `tpu_nb.checkpoint.track()` names (or a Trainer's state) `every` "15m"
    or "500steps", keeping `keep` (within `budget`, "15GB"); `resume=True` (or a directory) starts from
    the newest verified one; `deadline="8h30m"` or "21:00" stops the run
    gracefully before then, with a checkpoint. A rank that stops moving for
    longer than `watchdog` seconds (default: learned, 5x the median step, at
    least 60) gets every rank's stack and a verdict shown; "off" turns it off.
    `stack="torch_tpu"` (or "torch_xla") picks the TPU stack (default: the one that works with the installed torch);
    on TorchTPU, `mode` is "eager", "fused" or "compile" (default: fused, or eager when `fn` names a Trainer).
    Raises `WorkerError` with the worker's traceback if `fn` raised,
    `WorkerDied`, `TrainingInterrupted` or `TrainingTimedOut`.
    """
    options = LaunchOptions.from_user(
        cores=cores,
        timeout=timeout,
        all_ranks_output=all_ranks_output,
        progress=progress,
        all_results=all_results,
        stop_grace=stop_grace,
        spmd=spmd,
        mesh=mesh,
        doctor=doctor,
        compile_cache=compile_cache,
        checkpoint=checkpoint,
        every=every,
        keep=keep,
        budget=budget,
        resume=resume,
        deadline=deadline,
        watchdog=watchdog,
        stack=stack,
        mode=mode,
    )
    program = FunctionProgram(fn, args)
    name = str(getattr(fn, "__name__", "run"))
    title = f"tpu_nb.launch({name})"

    def value_of(ending: Ending) -> Any:
        problems = [problem for rank in sorted(ending.results) for problem in _not_returned(rank, ending.results[rank])]
        if problems:
            raise UsageError("\n".join(problems))
        if all_results:
            return [ending.results[rank].value for rank in sorted(ending.results)]
        return ending.results[0].value

    if background:

        def finish(ending: Ending, write: Write) -> Handback:
            return Handback(value_of(ending))

        handle: BackgroundRun = start_in_background(program, options, name, finish)
        return handle
    ending = run_in_foreground(Run(program, options, title))
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
