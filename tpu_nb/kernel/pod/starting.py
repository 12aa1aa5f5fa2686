"""Starting a pod run: checked first, its run directory written, then followed here (or, for an export, its commands printed).

`launch_pod` and `start_pod_in_background` are the one way `%%tpu_train
--pod` and `tpu_nb.pod.launch` start a run on a pod slice.
"""

from __future__ import annotations

import datetime
import shlex
import shutil
from pathlib import Path

from tpu_nb.basics.locations import is_url
from tpu_nb.kernel.endings.notebook_errors import TrainingInterrupted, refused
from tpu_nb.kernel.endings.run_ending import Ending
from tpu_nb.kernel.notebook.cell_output import Write, write_to_sys
from tpu_nb.kernel.notebook.returns import Finish
from tpu_nb.kernel.planning.declared_options import DEFAULT_RUNS_DIR
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.pod.backends import commands
from tpu_nb.kernel.pod.backends.gke import GkeSlice
from tpu_nb.kernel.pod.backends.slices import SliceError, TpuSlice
from tpu_nb.kernel.pod.backends.tpu_vm import TpuVmSlice
from tpu_nb.kernel.pod.pod_run import PodRun
from tpu_nb.kernel.pod.program import PodProgram, write_run_directory
from tpu_nb.kernel.pod.slice_checks import PodTarget, check
from tpu_nb.kernel.run.background import BackgroundRun, follow_in_background
from tpu_nb.kernel.run.followed_run import RunObserver, run_in_foreground
from tpu_nb.kernel.run.leftovers import private_directory
from tpu_nb.wire.run_directory import RESULTS, RunDirectory, upload


def launch_pod(
    program: PodProgram, target: PodTarget, options: LaunchOptions, title: str, write: Write = write_to_sys
) -> Ending | RunDirectory:
    """Check, build and start (or, for export, only write) a pod run, followed here; `LaunchRefused` lists what to fix."""
    checked = check(program, target, options, write)
    run, staging = _write_run(program, target, checked.tpu, exported=checked.backend is None)
    if checked.backend is None:
        _print_export(run, target, checked.tpu, write)
        return run
    try:
        return run_in_foreground(
            PodRun(checked.backend, run, options, title, write, runtime_label=checked.label, staging=staging, tpu=checked.tpu)
        )
    except (commands.CommandFailed, SliceError) as error:
        raise refused(str(error), pod=True) from None
    except KeyboardInterrupt:
        # Only the start lets an interrupt through (a started run stops gracefully); the backend undid what it made.
        raise TrainingInterrupted("interrupted while the pod run was starting: nothing it had created is left.") from None


def start_pod_in_background(
    program: PodProgram, target: PodTarget, options: LaunchOptions, name: str, finish: Finish
) -> BackgroundRun | RunDirectory:
    """The same, followed by a helper thread: the handle (with Stop and Kill buttons in a notebook) at once."""
    checked = check(program, target, options, write_to_sys)
    run, staging = _write_run(program, target, checked.tpu, exported=checked.backend is None)
    backend = checked.backend
    if backend is None:
        _print_export(run, target, checked.tpu, write_to_sys)
        return run
    title = f"background run `{name}` on {target.name}"

    def make_run(observers: list[RunObserver], write: Write) -> PodRun:
        return PodRun(backend, run, options, title, write, observers, runtime_label=checked.label, staging=staging, tpu=checked.tpu)

    try:
        return follow_in_background(make_run, name, finish)
    except (commands.CommandFailed, SliceError) as error:
        raise refused(str(error), pod=True) from None


def _write_run(program: PodProgram, target: PodTarget, tpu: TpuSlice | None, exported: bool) -> tuple[RunDirectory, Path | None]:
    """The run directory, written locally (private), and copied to the run's gs:// location when it has one.

    A gs:// run's local copy is temporary (removed when the run ends), except
    for an export, whose commands start it from that copy.
    """
    stamp = datetime.datetime.now().strftime("%m%d-%H%M%S")
    name = f"{target.name[: 39 - len(stamp)]}-{stamp}"  # a JobSet name fits 40 characters
    hosts, devices = (1, 1) if tpu is None else (tpu.hosts, tpu.chips)
    if not is_url(target.run_dir):
        return write_run_directory(program, Path(target.run_dir).resolve() / name, name, hosts, devices), None
    run_url = f"{target.run_dir.rstrip('/')}/{name}"
    staging = None if exported else private_directory("pod")
    local = Path(DEFAULT_RUNS_DIR).resolve() if staging is None else staging
    run = write_run_directory(program, local / name, name, hosts, devices, run_url)
    try:
        upload(run.path, run_url)
    except (ImportError, OSError, ValueError) as error:  # gcsfs missing, no access, a bad URL
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        raise refused(
            f"the run could not be copied to {run_url} ({type(error).__name__}: {error}); "
            "gs:// needs gcsfs here (pip install gcsfs) and write access to the bucket.",
            pod=True,
        ) from None
    return run, staging


def _print_export(run: RunDirectory, target: PodTarget, tpu: TpuSlice | None, write: Write) -> None:
    lines = [f"tpu_nb: wrote {run.path} (train.py, manifest.json, tpu_nb). Start it on every host at once:"]
    lines += ["", f"  on each host, from a copy of this directory:  PJRT_DEVICE=TPU python3 train.py   (rank 0 saves {RESULTS}/)"]
    vm = TpuVmSlice(target.name, target.zone, target.project)
    lines += ["", "  Cloud TPU VM slice, with gcloud:"]
    lines += [f"    {shlex.join(command)}" for command in (vm.prepare_command(), vm.copy_command(run), vm.start_command(run))]
    if tpu is not None and target.image is not None:
        gke = GkeSlice(tpu, target.image, target.namespace)
        gke.write_manifest(run)
        lines += ["", "  GKE, with kubectl (the JobSet and its ConfigMap are in jobset.yaml):"]
        lines += [f"    {shlex.join(gke.apply_command(run))}", f"    {shlex.join(gke.logs_command(run))}"]
    else:
        lines += ["", "  GKE: give --accelerator TYPE and --image IMAGE too, and jobset.yaml is written for kubectl apply."]
    write("stdout", "\n".join(lines) + "\n")
