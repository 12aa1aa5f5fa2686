"""A multi-host TPU slice on GKE: a JobSet applied with kubectl, its pods' logs followed, deleted at the end.

The run directory travels in a ConfigMap (`jobset.manifests`, packed by
`archive`); the results, which outlive the pods, go to the run's `gs://`
location. A request (a graceful stop, stacks) is a file in the run directory,
written in every pod with `kubectl exec`; ending a run deletes its JobSet.
"""

from __future__ import annotations

import io
import shlex
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from tpu_nb.kernel.pod.backends import commands
from tpu_nb.kernel.pod.backends.jobset import RUN_DIR, JobSetSpec, managed_selector, manifests, pod_selector, to_yaml
from tpu_nb.kernel.pod.backends.slices import SliceError, TpuSlice
from tpu_nb.wire.run_directory import RESULTS, TRAIN_SCRIPT, RunDirectory, download_results, request_shell

MANIFEST_FILE = "jobset.yaml"
PODS_TIMEOUT = 600.0  # seconds for the JobSet's pods to start (scheduling onto TPU nodes, pulling the image)
JOBSET_RESOURCE = "jobsets.jobset.x-k8s.io"


@dataclass(frozen=True, slots=True)
class GkeSlice:
    """A TPU slice shape in the cluster kubectl points at, and the container image that runs `train.py`."""

    tpu: TpuSlice
    image: str
    namespace: str = "default"
    python: str = "python3"

    command = "kubectl"

    @property
    def label(self) -> str:
        return f"GKE {self.tpu.accelerator_type} ({self.tpu.gke_accelerator}, {self.tpu.gke_topology})"

    def kubectl(self, *args: str) -> list[str]:
        # The namespace first: after an exec's `--`, a flag would go to the command in the pod.
        return ["kubectl", f"--namespace={self.namespace}", *args]

    def manifest(self, run: RunDirectory) -> str:
        spec = JobSetSpec(
            name=run.name,
            tpu=self.tpu,
            image=self.image,
            command=(self.python, TRAIN_SCRIPT),
            env={"PJRT_DEVICE": "TPU"},
            archive=archive(run),
            namespace=self.namespace,
        )
        return to_yaml(manifests(spec))

    def write_manifest(self, run: RunDirectory) -> Path:
        path = run.path / MANIFEST_FILE
        path.write_text(self.manifest(run))
        return path

    def apply_command(self, run: RunDirectory) -> list[str]:
        return self.kubectl("apply", "-f", str(run.path / MANIFEST_FILE))

    def logs_command(self, run: RunDirectory) -> list[str]:
        return self.kubectl(
            "logs", "--follow", f"--selector={pod_selector(run.name)}", "--all-containers", "--tail=-1", f"--max-log-requests={run.hosts}"
        )

    def end_commands(self, run_name: str) -> list[list[str]]:
        """What deletes everything run `run_name` created in the cluster (its JobSet, which ends its pods, and its ConfigMap)."""
        return [
            self.kubectl("delete", "jobset", run_name, "--ignore-not-found", "--wait=false"),
            self.kubectl("delete", "configmap", f"{run_name}-run", "--ignore-not-found", "--wait=false"),
        ]

    def stale_runs(self) -> list[str]:
        """tpu_nb's JobSets still in the namespace: runs of a kernel that is gone, or of another notebook."""
        found = commands.run(self.kubectl("get", "jobsets", f"--selector={managed_selector()}", "--output=name"))
        return sorted(name.rsplit("/", 1)[-1] for name in found.split())

    # Preflight.

    def check(self) -> None:
        """`SliceError` (with the fix) unless kubectl may create JobSets and the cluster has the TPU nodes."""
        try:
            allowed = commands.run(self.kubectl("auth", "can-i", "create", JOBSET_RESOURCE)).strip()
        except commands.CommandFailed as error:
            raise SliceError(
                "kubectl cannot reach a cluster: get its credentials first "
                f"(gcloud container clusters get-credentials CLUSTER --location LOCATION).\n{error}"
            ) from None
        if allowed != "yes":
            raise SliceError(
                f"kubectl may not create JobSets in namespace {self.namespace} (it said {allowed!r}): install JobSet in the "
                "cluster (kubectl apply --server-side -f https://github.com/kubernetes-sigs/jobset/releases/download/v0.10.1/manifests.yaml) "
                "or use an account that may."
            )
        selector = (
            f"cloud.google.com/gke-tpu-accelerator={self.tpu.gke_accelerator},cloud.google.com/gke-tpu-topology={self.tpu.gke_topology}"
        )
        nodes = commands.run(self.kubectl("get", "nodes", f"--selector={selector}", "--output=name")).split()
        if len(nodes) < self.tpu.hosts:
            raise SliceError(
                f"the cluster has {len(nodes)} nodes with {self.tpu.gke_accelerator} in topology {self.tpu.gke_topology}; "
                f"a {self.tpu.accelerator_type} needs {self.tpu.hosts}: add a node pool of that slice "
                f"(gcloud container node-pools create ... --tpu-topology {self.tpu.gke_topology})."
            )

    # Running.

    def start(self, run: RunDirectory) -> subprocess.Popen[bytes]:
        self.write_manifest(run)
        try:
            commands.run(self.apply_command(run))
            # `kubectl logs --follow` gives up on a pod still pulling its image or waiting for
            # TPU nodes: follow once every pod has left Pending.
            deadline = time.monotonic() + PODS_TIMEOUT
            while not self._all_started(run):
                if time.monotonic() > deadline:
                    raise SliceError(
                        f"the JobSet {run.name}'s pods did not start within {PODS_TIMEOUT:g}s "
                        f"(kubectl describe jobset {run.name} says why); it was deleted."
                    )
                time.sleep(2)
            return commands.start(self.logs_command(run))
        except BaseException as error:
            # An apply that failed half-way, timed out or was interrupted may have created
            # the ConfigMap, or a JobSet holding TPUs: nothing stays in the cluster.
            try:
                self.kill(run)
            except commands.CommandFailed as failed:
                raise SliceError(
                    f"the run did not start ({error}), and deleting what it created failed too ({failed}): delete it yourself: "
                    + "; ".join(shlex.join(command) for command in self.end_commands(run.name))
                ) from None
            raise

    def _all_started(self, run: RunDirectory) -> bool:
        phases = commands.run(
            self.kubectl("get", "pods", f"--selector={pod_selector(run.name)}", "--output=jsonpath={.items[*].status.phase}")
        ).split()
        return len(phases) >= run.hosts and "Pending" not in phases

    def pods(self, run: RunDirectory) -> list[str]:
        return commands.run(self.kubectl("get", "pods", f"--selector={pod_selector(run.name)}", "--output=name")).split()

    def deliver(self, run: RunDirectory, name: str, text: str) -> None:
        write = request_shell(RUN_DIR, name, text)
        for pod in self.pods(run):
            commands.run(self.kubectl("exec", pod, "--", "sh", "-c", write))

    def kill(self, run: RunDirectory) -> None:
        self.end(run.name)

    def end(self, run_name: str) -> str:
        """Delete run `run_name` from the cluster, even if the user interrupts meanwhile (nothing to say: "")."""
        for command in self.end_commands(run_name):
            commands.run_despite_interrupts(command)
        return ""

    def fetch_results(self, run: RunDirectory, into: Path) -> Path:
        """Copy the results host 0 saved at the run's gs:// location into `into`."""
        if run.run_url is None:
            raise SliceError("this GKE run has no gs:// location (--run-dir gs://...), so its results stayed in its pods")
        return download_results(run.run_url, into)

    def clean_up(self, run: RunDirectory) -> None:
        """Delete the ended JobSet and its ConfigMap (their logs were followed)."""
        self.kill(run)


def archive(run: RunDirectory) -> bytes:
    """The run directory as a .tar.gz (for a Kubernetes ConfigMap), paths relative to it, without results."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(run.path, arcname=".", filter=_without_results)
    return buffer.getvalue()


def _without_results(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    return None if member.name.startswith(f"./{RESULTS}") else member
