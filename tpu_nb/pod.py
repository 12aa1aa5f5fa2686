"""`tpu_nb.pod`: run training on a multi-host TPU pod slice from Python (what `%%tpu_train --pod` does for a cell).

    result = tpu_nb.pod.launch(train, "my-slice", zone="us-east5-b", returns=("model",))
    model.load_state_dict(result.returned["model"])

`train` is the training code (a string, or a function whose source is sent
and called); the `%%tpu_prepare` cells run so far come first on every host.
`results(run_dir)` reads what a run you started yourself saved.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tpu_nb.kernel.planning.declared_options import declare

if TYPE_CHECKING:
    from tpu_nb.kernel.pod.api import PodResult
    from tpu_nb.kernel.run.background import BackgroundRun
    from tpu_nb.wire.run_directory import RunDirectory


def launch(train: str | Callable[[], Any], pod: str, **options: Any) -> PodResult | BackgroundRun | RunDirectory:
    """Run `train` on every host of the TPU slice `pod` and return rank 0's value and `returns`, as a `PodResult`.

    `train` is the training code, or a function whose source is sent and
    called. An interrupt stops every host gracefully at the same step; a
    second one ends them. With `background=True`, a `BackgroundRun` handle at
    once (its `result` is the `PodResult`); with `backend="export"`, the
    written `RunDirectory` (its commands are printed). A tpu_nb run still
    running on the slice is refused, naming it and the command that ends it,
    unless `kill_stale` (then it is ended first). Raises `LaunchRefused`
    (nothing started) with what to fix, what `tpu_nb.launch` raises when the
    run fails, or `NotReturned` when a name in `returns` did not come back.
    """
    from tpu_nb.kernel.planning.declared_options import check_keywords, given
    from tpu_nb.kernel.planning.options import LaunchOptions
    from tpu_nb.kernel.pod.api import launch_function
    from tpu_nb.kernel.pod.recording import RECORDED
    from tpu_nb.kernel.pod.slice_checks import PodTarget

    check_keywords("tpu_nb.pod.launch", "pod_launch", options)
    call = given("pod_launch", "call", options)
    return launch_function(
        train,
        PodTarget(name=pod, **given("pod_launch", "pod", options)),
        LaunchOptions.from_user(**given("pod_launch", "run", options)),
        tuple(call["returns"]),
        RECORDED.cells() if call["prepared"] else (),
        background=call["background"],
    )


declare("pod_launch", launch)


def results(run_dir: str | os.PathLike[str], *, weights_only: bool = False) -> PodResult:
    """Rank 0's value and `--return` names from a run directory's `results/` (local, or gs://...).

    For runs you start yourself (`--backend export`): copy `results/` back from
    host 0 into the run directory, then `tpu_nb.pod.results(run_dir)`.
    Module weights load without unpickling; the value and other names are
    unpickled, which runs code from whoever could write there: from a
    location others can write, pass `weights_only=True` (they then stand as
    text saying they were not loaded).
    """
    from tpu_nb.kernel.pod.api import read_results

    return read_results(os.fspath(run_dir), weights_only)
