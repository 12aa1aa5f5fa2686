"""Starting a pod run: choose the backend, check everything first (nothing starts otherwise), build the run, follow it.

`launch_pod` is the one way `%%tpu_train --pod` and `tpu_nb.pod.launch`
start a run on a pod slice; with the export backend it only writes the run
directory and prints the commands that would start it.
"""

from __future__ import annotations

import datetime
import inspect
import re
import shlex
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tpu_nb.wire.results import ModuleWeights, RankResult, load_result
from tpu_nb.workers.host import MATCHED_PACKAGES, RESULTS, Cell, same_release

from ..background import BackgroundRun, Finish, follow_in_background
from ..endings import Ending
from ..errors import LaunchRefused, TrainingInterrupted
from ..options import LaunchOptions
from ..output import Write, write_to_sys
from ..runs import RunObserver, run_in_foreground
from . import commands
from .following import PodBackend, PodRun
from .gke import GkeSlice
from .jobset import validate_name
from .program import PodProgram, RunDirectory, download_results, notebook_packages, remove_staging, upload, write_run_directory
from .slices import SliceError, TpuSlice, check_pod_name, parse_slice
from .tpu_vm import HostVersions, TpuVmSlice

Backend = Literal["auto", "gcloud", "gke", "export"]
BACKENDS: tuple[Backend, ...] = ("auto", "gcloud", "gke", "export")
DEFAULT_RUNS_DIR = "tpu_nb_pod_runs"
_REMOTE = re.compile(r"^[a-z][a-z0-9+.-]*://")


@dataclass(frozen=True, slots=True)
class PodTarget:
    """Where a pod run goes, as the user named it."""

    name: str  # the TPU VM's name (gcloud), or the JobSet's name prefix (GKE)
    backend: Backend = "auto"
    zone: str | None = None
    project: str | None = None
    accelerator: str | None = None  # e.g. v5litepod-16: for GKE and export (gcloud reads the TPU VM's)
    image: str | None = None  # GKE: the container image with torch, torch_xla and the cells' libraries
    run_dir: str = DEFAULT_RUNS_DIR  # a local directory, or gs://bucket/path: where each run's directory goes
    namespace: str = "default"  # GKE
    kill_stale: bool = False  # end a tpu_nb run still running on the slice (left by a kernel that died) instead of refusing


def launch_pod(
    program: PodProgram, target: PodTarget, options: LaunchOptions, title: str, write: Write = write_to_sys
) -> Ending | RunDirectory:
    """Check, build and start (or, for export, only write) a pod run, followed here; `LaunchRefused` lists what to fix."""
    run, backend, label = _checked_run(program, target, options, write)
    if backend is None:
        return run
    try:
        return run_in_foreground(PodRun(backend, run, options, title, write, runtime_label=label))
    except (commands.CommandFailed, SliceError) as error:
        raise LaunchRefused(f"tpu_nb could not start the pod run:\n- {error}") from None
    except KeyboardInterrupt:
        # Only the start lets an interrupt through (a started run stops gracefully); the backend undid what it made.
        raise TrainingInterrupted("interrupted while the pod run was starting: nothing it had created is left.") from None


def start_pod_in_background(
    program: PodProgram, target: PodTarget, options: LaunchOptions, name: str, finish: Finish
) -> BackgroundRun | RunDirectory:
    """The same, followed by a helper thread: the handle (with Stop and Kill buttons in a notebook) at once."""
    run, backend, label = _checked_run(program, target, options, write_to_sys)
    if backend is None:
        return run
    title = f"background run `{name}` on {target.name}"

    def make_run(observers: list[RunObserver], write: Write) -> PodRun:
        return PodRun(backend, run, options, title, write, observers, runtime_label=label)

    try:
        return follow_in_background(make_run, name, finish)
    except (commands.CommandFailed, SliceError) as error:
        raise LaunchRefused(f"tpu_nb could not start the pod run:\n- {error}") from None


def _checked_run(
    program: PodProgram, target: PodTarget, options: LaunchOptions, write: Write
) -> tuple[RunDirectory, PodBackend | None, str]:
    """Every check, then the run directory written: with its backend and the dashboard's label (no backend: exported)."""
    backend_name = _choose_backend(target)
    problems = _option_problems(options, program, target, backend_name)
    tpu, backend = None, None
    if not problems:
        try:
            tpu, backend, stale = _preflight(target, backend_name)
            problems += _stale_problems(backend, stale, target, write)
        except SliceError as error:
            problems.append(str(error))
        except (commands.CommandFailed, ValueError, KeyError, TypeError) as error:
            # A cloud tool that failed, or answered what tpu_nb cannot read: its own words.
            problems.append(f"checking the slice failed: {error}")
    if tpu is not None and program.mesh is not None and program.mesh.devices != tpu.chips:
        problems.append(f"--mesh {program.mesh} covers {program.mesh.devices} devices, but a {tpu.accelerator_type} has {tpu.chips}.")
    if problems:
        raise LaunchRefused("tpu_nb did not start the pod run:\n" + "\n".join(f"- {problem}" for problem in problems))
    run = _write_run(program, target, tpu, exported=backend is None)
    if backend is None:
        _print_export(run, target, tpu, write)
        return run, None, ""
    label = backend.label if tpu is None else f"{backend.label}: {tpu.accelerator_type}, {tpu.hosts} hosts of {tpu.chips_per_host} chips"
    return run, backend, label


def _choose_backend(target: PodTarget) -> Literal["gcloud", "gke", "export"]:
    if target.backend != "auto":
        return target.backend
    if target.image is not None:
        return "gke"  # only GKE runs a container image
    if commands.installed("gcloud"):
        return "gcloud"
    raise LaunchRefused(
        "tpu_nb did not start the pod run:\n- gcloud is not installed here: install the Google Cloud CLI "
        "(https://cloud.google.com/sdk/docs/install), give --image IMAGE to run on GKE with kubectl, "
        "or --backend export to write the run directory and the commands to start it yourself."
    )


def _option_problems(options: LaunchOptions, program: PodProgram, target: PodTarget, backend: str) -> list[str]:
    problems = options.problems()
    if options.cores is not None:
        problems.append("--cores: a pod run uses every TPU core of every host; leave --cores out.")
    if options.all_results:
        problems.append("all_results=True: a pod run returns rank 0's result; leave all_results out.")
    if target.backend not in BACKENDS:
        problems.append(f"--backend {target.backend}: choose one of {', '.join(BACKENDS)}.")

    if backend == "gke":
        if target.image is None:
            problems.append(
                "--backend gke needs --image IMAGE: a container image with torch, torch_xla and the libraries your cells import."
            )
        if target.accelerator is None:
            problems.append("--backend gke needs --accelerator TYPE (e.g. v5litepod-16): the TPU slice the JobSet asks for.")
        if not _REMOTE.match(target.run_dir):
            problems.append(
                "--backend gke needs --run-dir gs://BUCKET/PATH: the pods save the results there (with gcsfs in the image) "
                "for the notebook to fetch once they are gone."
            )
    try:
        # Before anything is written: the name becomes a directory, a remote path, a JobSet's name.
        check_pod_name(target.name)
        if backend == "gke" or (backend == "export" and target.image is not None):
            validate_name(target.name)
    except SliceError as error:
        problems.append(str(error) if str(error).startswith("--pod") else f"--pod {target.name}: {error}")
    return problems


def _preflight(target: PodTarget, backend: str) -> tuple[TpuSlice | None, PodBackend | None, list[str]]:
    """The slice, a backend that reaches it, and tpu_nb runs still running there; `SliceError` with the fix otherwise."""
    if backend == "export":
        return (None if target.accelerator is None else parse_slice(target.accelerator)), None, []
    if backend == "gke":
        assert target.accelerator is not None and target.image is not None
        gke = GkeSlice(parse_slice(target.accelerator), target.image, target.namespace)
        if not commands.installed("kubectl"):
            raise SliceError("kubectl is not installed here: install it (gcloud components install kubectl), or use --backend export.")
        gke.check()
        return gke.tpu, gke, gke.stale_runs()
    if not commands.installed("gcloud"):
        raise SliceError("gcloud is not installed here: install the Google Cloud CLI, or use --backend export.")
    _check_gcloud_account()
    vm = TpuVmSlice(target.name, target.zone, target.project)
    tpu = vm.describe()
    hosts = vm.host_versions()
    problems = version_problems(notebook_packages(), hosts, tpu.hosts)
    if problems:
        raise SliceError("\n- ".join(problems))
    return tpu, vm, sorted({run for host in hosts for run in host.running})


def _stale_problems(backend: PodBackend | None, stale: list[str], target: PodTarget, write: Write) -> list[str]:
    """A run still running where this one would go: refused with the commands that end it, or ended (--pod-kill-stale)."""
    if backend is None or not stale:
        return []
    if target.kill_stale:
        for run_name in stale:
            backend.end(run_name)
            write("stderr", f"tpu_nb: ended the run {run_name} that was still running on {target.name} (--pod-kill-stale).\n")
        return []
    ending = "; ".join(_shell(command) for run_name in stale for command in backend.end_commands(run_name))
    return [
        f"a tpu_nb run is still running on {target.name}: {', '.join(stale)} (its kernel died, or another notebook runs it). "
        f"End it first: {ending}\n  or add --pod-kill-stale to end it and start this run."
    ]


def _check_gcloud_account() -> None:
    try:
        account = commands.run(["gcloud", "auth", "list", "--filter=status:ACTIVE", "--format=value(account)"]).strip()
    except commands.CommandFailed as error:
        raise SliceError(f"gcloud could not list its accounts: {error}") from None
    if not account:
        raise SliceError(
            "gcloud has no active account: run `gcloud auth login` in a terminal (in Colab: "
            "from google.colab import auth; auth.authenticate_user()). tpu_nb never prompts."
        )


def version_problems(notebook: dict[str, str | None], hosts: list[HostVersions], expected_hosts: int) -> list[str]:
    """What the hosts' torch and torch_xla say against the notebook's, each with the fix."""
    problems = []
    if len(hosts) != expected_hosts:
        problems.append(
            f"{len(hosts)} of the slice's {expected_hosts} hosts answered the version check; check them with gcloud ... ssh --worker=all."
        )
    for package in MATCHED_PACKAGES:
        wanted = notebook.get(package)
        found = {getattr(host, package) for host in hosts}
        if wanted is not None:
            differing = sorted(host.host for host in hosts if not same_release(getattr(host, package), wanted))
            if differing:
                versions = sorted({str(getattr(host, package)) for host in hosts if host.host in differing})
                problems.append(
                    f"{package} {wanted} in the notebook, but {', '.join(versions)} on {', '.join(differing)}: install the "
                    f"notebook's version on every host (gcloud compute tpus tpu-vm ssh NAME --worker=all --command='pip install "
                    f"{package}=={wanted.split('+')[0]}')."
                )
        elif len(found) > 1:
            problems.append(
                f"the hosts differ in {package} ({', '.join(sorted(map(str, found)))}): install the same version on every host."
            )
    return problems


def _write_run(program: PodProgram, target: PodTarget, tpu: TpuSlice | None, exported: bool) -> RunDirectory:
    """The run directory, written locally (private), and copied to the run's gs:// location when it has one.

    A gs:// run's local copy is temporary (removed when the run ends), except
    for an export, whose commands start it from that copy.
    """
    stamp = datetime.datetime.now().strftime("%m%d-%H%M%S")
    name = f"{target.name[: 39 - len(stamp)]}-{stamp}"  # a JobSet name fits 40 characters
    hosts, devices = (1, 1) if tpu is None else (tpu.hosts, tpu.chips)
    if not _REMOTE.match(target.run_dir):
        return write_run_directory(program, Path(target.run_dir).resolve() / name, name, hosts, devices)
    run_url = f"{target.run_dir.rstrip('/')}/{name}"
    staging = None if exported else Path(tempfile.mkdtemp(prefix="tpu_nb-pod-"))
    local = Path(DEFAULT_RUNS_DIR).resolve() if staging is None else staging
    run = write_run_directory(program, local / name, name, hosts, devices, run_url, staging)
    try:
        upload(run, run_url)
    except (ImportError, OSError, ValueError) as error:  # gcsfs missing, no access, a bad URL
        remove_staging(run)
        raise LaunchRefused(
            f"tpu_nb did not start the pod run:\n- the run could not be copied to {run_url} ({type(error).__name__}: {error}); "
            "gs:// needs gcsfs here (pip install gcsfs) and write access to the bucket."
        ) from None
    return run


def _print_export(run: RunDirectory, target: PodTarget, tpu: TpuSlice | None, write: Write) -> None:
    lines = [f"tpu_nb: wrote {run.path} (train.py, manifest.json, tpu_nb). Start it on every host at once:"]
    lines += ["", f"  on each host, from a copy of this directory:  PJRT_DEVICE=TPU python3 train.py   (rank 0 saves {RESULTS}/)"]
    vm = TpuVmSlice(target.name, target.zone, target.project)
    lines += ["", "  Cloud TPU VM slice, with gcloud:"]
    lines += [f"    {_shell(command)}" for command in (vm.prepare_command(), vm.copy_command(run), vm.start_command(run))]
    if tpu is not None and target.image is not None:
        gke = GkeSlice(tpu, target.image, target.namespace)
        gke.write_manifest(run)
        lines += ["", "  GKE, with kubectl (the JobSet and its ConfigMap are in jobset.yaml):"]
        lines += [f"    {_shell(gke.apply_command(run))}", f"    {_shell(gke.logs_command(run))}"]
    else:
        lines += ["", "  GKE: give --accelerator TYPE and --image IMAGE too, and jobset.yaml is written for kubectl apply."]
    write("stdout", "\n".join(lines) + "\n")


def _shell(argv: list[str]) -> str:
    return shlex.join(argv)


@dataclass(frozen=True, slots=True)
class PodResult:
    """What `tpu_nb.pod.launch` gives back: rank 0's value and its `returns` (a module as its state dict)."""

    value: Any
    returned: dict[str, Any]


def launch_function(
    train: str | Callable[[], Any],
    target: PodTarget,
    options: LaunchOptions,
    returns: tuple[str, ...],
    prepared: tuple[Cell, ...],
) -> PodResult | RunDirectory:
    """`tpu_nb.pod.launch`: `train` is the training cell's code, or a function (its source is sent, then it is called)."""
    if callable(train):
        try:
            source = textwrap.dedent(inspect.getsource(train))
        except (OSError, TypeError) as error:
            raise LaunchRefused(
                f"tpu_nb did not start the pod run:\n- its source cannot be read ({error}): pass the code as a string."
            ) from None
        name = getattr(train, "__name__", "train")
        code, title = f"{source}\n{name}()", f"tpu_nb.pod.launch({name})"
    else:
        code, title = train, "tpu_nb.pod.launch"
    program = PodProgram(
        prepared,
        Cell("tpu_nb.pod.launch", "# tpu_nb.pod.launch", code),
        returns,
        options.spmd,
        options.mesh,
        options.doctor,
        options.compile_cache,
    )
    ending = launch_pod(program, target, options, title)
    if not isinstance(ending, Ending):
        return ending
    if ending.error is not None:
        raise ending.error
    result = ending.results[0]
    if result.missing:
        raise LaunchRefused(f"returns: the code did not define {', '.join(result.missing)} on rank 0; everything else came back.")
    return pod_result(result)


def pod_result(result: RankResult) -> PodResult:
    returned = {name: value.state_dict if isinstance(value, ModuleWeights) else value for name, value in result.returned.items()}
    return PodResult(result.value, returned)


def read_results(run_dir: str, weights_only: bool = False) -> PodResult:
    """Rank 0's results from a run directory (local or gs://) that host 0 saved them in.

    Module weights load without unpickling; other values are unpickled unless
    `weights_only` (then they stand as `NotTransferable`).
    """
    if _REMOTE.match(run_dir):
        with tempfile.TemporaryDirectory(prefix="tpu_nb-pod-") as local:
            return read_results(str(download_results(run_dir, Path(local)).parent), weights_only)
    result = load_result(Path(run_dir) / RESULTS, 0, pickled=not weights_only)
    if result is None:
        raise FileNotFoundError(
            f"{run_dir} holds no results of rank 0 ({RESULTS}/result-0.json): has the run ended, and was {RESULTS}/ copied back?"
        )
    return pod_result(result)
