"""Before a pod run starts: the backend chosen, the options and the pod's name checked, the slice and its hosts checked.

Nothing is written and nothing starts until every check passed: `check`
raises one `LaunchRefused` listing every problem with its fix, a cloud
tool's failure in its own words. A tpu_nb run still running where this one
would go is refused too, naming the commands that end it, or ended when the
user asked for that (`--kill-stale`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Literal

from tpu_nb.basics.locations import is_url
from tpu_nb.kernel.endings.notebook_errors import refused
from tpu_nb.kernel.notebook.cell_output import Write
from tpu_nb.kernel.planning.declared_options import OPTION_NAMED
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.pod.backends import commands
from tpu_nb.kernel.pod.backends.gke import GkeSlice
from tpu_nb.kernel.pod.backends.jobset import validate_name
from tpu_nb.kernel.pod.backends.protocol import PodBackend
from tpu_nb.kernel.pod.backends.slices import SliceError, TpuSlice, check_pod_name, parse_slice
from tpu_nb.kernel.pod.backends.tpu_vm import HostVersions, TpuVmSlice
from tpu_nb.kernel.pod.program import PodProgram, notebook_packages
from tpu_nb.runtime.versions import release, same_release
from tpu_nb.wire.run_directory import MATCHED_PACKAGES

Backend = Literal["auto", "gcloud", "gke", "export"]
BACKENDS: tuple[Backend, ...] = ("auto", "gcloud", "gke", "export")


@dataclass(frozen=True, slots=True, kw_only=True)
class PodTarget:
    """Where a pod run goes, as the user named it."""

    name: str  # the TPU VM's name (gcloud), or the JobSet's name prefix (GKE)
    backend: Backend = "auto"
    zone: str | None = None
    project: str | None = None
    accelerator: str | None = None  # e.g. v5litepod-16: for GKE and export (gcloud reads the TPU VM's)
    image: str | None = None  # GKE: the container image with torch, torch_xla and the cells' libraries
    run_dir: str = OPTION_NAMED["run_dir"].default  # a local directory, or gs://bucket/path: where each run's directory goes
    namespace: str = OPTION_NAMED["namespace"].default  # GKE
    kill_stale: bool = False  # end a tpu_nb run still running on the slice (left by a kernel that died) instead of refusing


@dataclass(frozen=True, slots=True)
class CheckedTarget:
    """What the checks found: the slice (None for an export without --accelerator) and the backend (None: export)."""

    tpu: TpuSlice | None
    backend: PodBackend | None

    @property
    def label(self) -> str:
        """The dashboard's runtime line, e.g. "TPU VM my-slice: v4-16, 2 hosts of 4 chips"."""
        assert self.backend is not None
        if self.tpu is None:
            return self.backend.label
        return f"{self.backend.label}: {self.tpu.accelerator_type}, {self.tpu.hosts} hosts of {self.tpu.chips_per_host} chips"


def check(program: PodProgram, target: PodTarget, options: LaunchOptions, write: Write) -> CheckedTarget:
    """Every check before a pod run; `LaunchRefused` with every problem and its fix."""
    backend_name = choose_backend(target)
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
        raise refused(problems, pod=True)
    return CheckedTarget(tpu, backend)


def choose_backend(target: PodTarget) -> Literal["gcloud", "gke", "export"]:
    if target.backend != "auto":
        return target.backend
    if target.image is not None:
        return "gke"  # only GKE runs a container image
    if commands.installed("gcloud"):
        return "gcloud"
    raise refused(
        "gcloud is not installed here: install the Google Cloud CLI "
        "(https://cloud.google.com/sdk/docs/install), give --image IMAGE to run on GKE with kubectl, "
        "or --backend export to write the run directory and the commands to start it yourself.",
        pod=True,
    )


def _option_problems(options: LaunchOptions, program: PodProgram, target: PodTarget, backend: str) -> list[str]:
    problems = options.problems()
    if options.cores is not None:
        problems.append("--cores: a pod run uses every TPU core of every host; leave --cores out.")
    if options.checkpoints is not None:
        problems.append("--checkpoint: checkpoints are for runs on this machine for now; save from the training cell on a pod.")
    if options.all_results:
        problems.append("all_results=True: a pod run returns rank 0's result; leave all_results out.")
    if options.stack == "torch_tpu" or options.mode is not None:
        problems.append(
            "--stack torch_tpu / --mode: pod runs use torch_xla on every host; TorchTPU runs on this machine's chips only for now."
        )
    if target.backend not in BACKENDS:
        problems.append(f"--backend {target.backend}: choose one of {', '.join(BACKENDS)}.")

    if backend == "gke":
        if target.image is None:
            problems.append(
                "--backend gke needs --image IMAGE: a container image with torch, torch_xla and the libraries your cells import."
            )
        if target.accelerator is None:
            problems.append("--backend gke needs --accelerator TYPE (e.g. v5litepod-16): the TPU slice the JobSet asks for.")
        if not is_url(target.run_dir):
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
    """A run still running where this one would go: refused with the commands that end it, or ended (--kill-stale)."""
    if backend is None or not stale:
        return []
    if target.kill_stale:
        for run_name in stale:
            said = backend.end(run_name)
            ended = f"tpu_nb: ended the run {run_name} that was still running on {target.name} (--kill-stale)"
            write("stderr", f"{ended}, but for what its hosts said:\n{said}\n" if said else f"{ended}.\n")
        return []
    ending = "; ".join(shlex.join(command) for run_name in stale for command in backend.end_commands(run_name))
    return [
        f"a tpu_nb run is still running on {target.name}: {', '.join(stale)} (its kernel died, or another notebook runs it). "
        f"End it first: {ending}\n  or add --kill-stale to end it and start this run."
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
                    f"{package}=={release(wanted)}')."
                )
        elif len(found) > 1:
            problems.append(
                f"the hosts differ in {package} ({', '.join(sorted(map(str, found)))}): install the same version on every host."
            )
    return problems
