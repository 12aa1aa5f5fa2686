"""`tpu_nb.pod`'s work: run code or a function on a pod slice from Python, and read a run's results.

`tpu_nb/pod.py` is the public face; this module does what it asks, through
the same start as `%%tpu_train --pod` (`starting.launch_pod`).
"""

from __future__ import annotations

import inspect
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpu_nb.basics.locations import is_url
from tpu_nb.kernel.endings.notebook_errors import NotReturned, refused
from tpu_nb.kernel.endings.run_ending import Ending
from tpu_nb.kernel.notebook.cell_output import Write
from tpu_nb.kernel.notebook.returns import Handback
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.pod.program import PodProgram
from tpu_nb.kernel.pod.slice_checks import PodTarget
from tpu_nb.kernel.pod.starting import launch_pod, start_pod_in_background
from tpu_nb.kernel.run.background import BackgroundRun
from tpu_nb.wire.results import ModuleWeights, RankResult, ResultNotLoaded, load_result
from tpu_nb.wire.run_directory import RESULTS, Cell, RunDirectory, download_results


@dataclass(frozen=True, slots=True)
class PodResult:
    """What `tpu_nb.pod.launch` gives back: rank 0's value and its `returns` (a module as its state dict)."""

    value: Any
    """Rank 0's value: the training cell's last line, or the function's return value."""
    returned: dict[str, Any]
    """Each name of `returns` as rank 0 held it (a module as its state dict)."""


def launch_function(
    train: str | Callable[[], Any],
    target: PodTarget,
    options: LaunchOptions,
    returns: tuple[str, ...],
    prepared: tuple[Cell, ...],
    background: bool = False,
) -> PodResult | BackgroundRun | RunDirectory:
    """`tpu_nb.pod.launch`: `train` is the training cell's code, or a function (its source is sent, then it is called)."""
    if callable(train):
        try:
            source = textwrap.dedent(inspect.getsource(train))
        except (OSError, TypeError) as error:
            raise refused(f"its source cannot be read ({error}): pass the code as a string.", pod=True) from None
        name = getattr(train, "__name__", "train")
        code, title = f"{source}\n{name}()", f"tpu_nb.pod.launch({name})"
    else:
        name, code, title = "pod_run", train, "tpu_nb.pod.launch"
    program = PodProgram(
        prepared,
        Cell("tpu_nb.pod.launch", "# tpu_nb.pod.launch", code),
        returns,
        options.spmd,
        options.mesh,
        options.doctor,
        options.compile_cache,
        options.watchdog,
    )
    if background:

        def finish(ending: Ending, write: Write) -> Handback:
            try:
                return Handback(_returned(ending.results[0]))
            except NotReturned as problem:
                return Handback(problem=problem)

        return start_pod_in_background(program, target, options, name, finish)
    ending = launch_pod(program, target, options, title)
    if not isinstance(ending, Ending):
        return ending
    if ending.error is not None:
        raise ending.error
    return _returned(ending.results[0])


def _returned(result: RankResult) -> PodResult:
    """Rank 0's value and `returns`; `NotReturned` when one of them did not come back."""
    problems = [f"returns: the code did not define `{name}` on rank 0." for name in result.missing]
    problems += [lost.explain() for lost in result.lost]
    if problems:
        raise NotReturned("\n".join(problems) + "\nEverything else came back.")
    return pod_result(result)


def pod_result(result: RankResult) -> PodResult:
    returned = {name: value.state_dict if isinstance(value, ModuleWeights) else value for name, value in result.returned.items()}
    return PodResult(result.value, returned)


def read_results(run_dir: str, weights_only: bool = False) -> PodResult:
    """Rank 0's results from a run directory (local or gs://) that host 0 saved them in.

    Module weights load without unpickling; other values are unpickled unless
    `weights_only` (then they stand as `NotTransferable`).
    """
    if is_url(run_dir):
        with tempfile.TemporaryDirectory(prefix="tpu_nb-pod-") as local:
            try:
                fetched = download_results(run_dir, Path(local))
            except (ImportError, OSError, ValueError) as error:  # gcsfs missing, no access, no such run
                raise NotReturned(f"could not read the results at {run_dir} ({type(error).__name__}: {error}).") from None
            return read_results(str(fetched.parent), weights_only)
    try:
        result = load_result(Path(run_dir) / RESULTS, 0, pickled=not weights_only)
    except ResultNotLoaded as error:
        raise NotReturned(f"rank 0's results in {run_dir} cannot be read: {error}") from None
    if result is None:
        raise NotReturned(
            f"{run_dir} holds no results of rank 0 ({RESULTS}/result-0.json): has the run ended, and was {RESULTS}/ copied back?"
        )
    return pod_result(result)
