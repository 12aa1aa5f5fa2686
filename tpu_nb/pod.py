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

if TYPE_CHECKING:
    from tpu_nb.kernel.pod.api import PodResult
    from tpu_nb.wire.run_directory import RunDirectory


def launch(
    train: str | Callable[[], Any],
    pod: str,
    *,
    backend: str = "auto",
    zone: str | None = None,
    project: str | None = None,
    accelerator: str | None = None,
    image: str | None = None,
    run_dir: str = "tpu_nb_pod_runs",
    namespace: str = "default",
    kill_stale: bool = False,
    returns: tuple[str, ...] = (),
    spmd: bool = False,
    mesh: str | None = None,
    doctor: bool = True,
    compile_cache: str | None = None,
    timeout: float | None = None,
    progress: bool = True,
    stop_grace: float = 5.0,
    all_ranks_output: bool = False,
    prepared: bool = True,
) -> PodResult | RunDirectory:
    """Run `train` on every host of the TPU slice `pod` and return rank 0's value and `returns`, as a `PodResult`.

    `backend`: "gcloud" (a TPU VM slice named `pod`), "gke" (a JobSet named
    after `pod`, with `image`, `accelerator` and a gs:// `run_dir`), "export"
    (write the run directory and print the commands; returns the
    `RunDirectory`), or "auto" (gke with an image, else gcloud). `prepared`:
    run the notebook's `%%tpu_prepare` cells first on every host. An interrupt
    stops every host gracefully at the same step; a second one ends them.
    A tpu_nb run still running on the slice is refused, naming it and the
    command that ends it, unless `kill_stale` (then it is ended first).
    Raises `LaunchRefused` (nothing started) with what to fix, or what
    `tpu_nb.launch` raises when the run fails.
    """
    from tpu_nb.kernel.planning.options import LaunchOptions
    from tpu_nb.kernel.pod.api import launch_function
    from tpu_nb.kernel.pod.recording import RECORDED
    from tpu_nb.kernel.pod.slice_checks import PodTarget

    options = LaunchOptions.from_user(
        timeout=timeout,
        all_ranks_output=all_ranks_output,
        progress=progress,
        stop_grace=stop_grace,
        spmd=spmd,
        mesh=mesh,
        doctor=doctor,
        compile_cache=compile_cache,
    )
    target = PodTarget(
        name=pod,
        backend=backend,  # type: ignore[arg-type]  # checked with the other options: a wrong one is refused by name
        zone=zone,
        project=project,
        accelerator=accelerator,
        image=image,
        run_dir=run_dir,
        namespace=namespace,
        kill_stale=kill_stale,
    )
    return launch_function(train, target, options, tuple(returns), RECORDED.cells() if prepared else ())


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
