"""Kubernetes manifests that run a notebook's training on a multi-host TPU slice in GKE (a JobSet)."""

from __future__ import annotations

import base64
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from tpu_nb.kernel.pod.backends.slices import SliceError, TpuSlice

CONFIG_DIR = "/tpu_nb_config"
"""Where the ConfigMap holding the run archive is mounted (read-only)."""
RUN_DIR = "/tpu_nb_run"
"""The writable directory the archive is unpacked into; the container's working directory."""
ARCHIVE_KEY = "run.tar.gz"
MAX_ARCHIVE_BASE64 = 900 * 1024
"""A ConfigMap holds at most 1 MiB; this leaves room for the rest of the object."""
MAX_NAME_LENGTH = 40
"""JobSet names its pods `<name>-workers-<job>-<index>-<5 random>`, and a pod name must fit in 63 characters."""

_MANAGED_BY = {"app.kubernetes.io/managed-by": "tpu_nb"}
_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


@dataclass(frozen=True, slots=True)
class JobSetSpec:
    """What to run, on which slice."""

    name: str
    """The JobSet's name, also the prefix of its ConfigMap's."""
    tpu: TpuSlice
    image: str
    command: tuple[str, ...]
    """The argv the container runs, in the unpacked run directory."""
    env: Mapping[str, str]
    archive: bytes
    """A .tar.gz of the run directory."""
    namespace: str = "default"


def validate_name(name: str) -> str:
    """`name` if it can name a JobSet (a DNS-1035 label short enough for its pods' names)."""
    if len(name) > MAX_NAME_LENGTH or not _NAME.fullmatch(name):
        raise SliceError(
            f"{name!r} cannot name a JobSet: use at most {MAX_NAME_LENGTH} lower-case letters, digits and '-', "
            "starting with a letter and ending with a letter or digit, e.g. 'tpu-nb-run-1'."
        )
    return name


def manifests(spec: JobSetSpec) -> list[dict[str, Any]]:
    """The ConfigMap carrying the run archive, then the JobSet that runs `spec.command` on every host of the slice."""
    name = validate_name(spec.name)
    encoded = base64.b64encode(spec.archive).decode("ascii")
    if len(encoded) > MAX_ARCHIVE_BASE64:
        raise SliceError(
            f"The run directory packs to {len(spec.archive) // 1024} KiB ({len(encoded) // 1024} KiB as base64), "
            f"more than the {MAX_ARCHIVE_BASE64 // 1024} KiB a ConfigMap can carry: keep datasets and checkpoints "
            "out of the run directory (read them from a bucket, e.g. gs://…) so only code and small files are sent."
        )
    config_map = f"{name}-run"
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": config_map, "namespace": spec.namespace, "labels": dict(_MANAGED_BY)},
            "binaryData": {ARCHIVE_KEY: encoded},
        },
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {
                "name": name,
                "namespace": spec.namespace,
                "labels": dict(_MANAGED_BY),
                # One JobSet per node pool: a slice's hosts are one node pool, so the pods land on one slice.
                "annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"},
            },
            "spec": {
                # A failed host leaves the others waiting in collectives; fail the run instead of restarting it.
                "failurePolicy": {"maxRestarts": 0},
                "replicatedJobs": [{"name": "workers", "replicas": 1, "template": _job(spec, config_map)}],
            },
        },
    ]


def _job(spec: JobSetSpec, config_map: str) -> dict[str, Any]:
    # One pod per host, each with a stable index (the worker's place in the slice).
    hosts = spec.tpu.hosts
    archive = f"{CONFIG_DIR}/{ARCHIVE_KEY}"
    script = f"tar -xzf {archive} -C {RUN_DIR} && exec {shlex.join(spec.command)}"
    container = {
        "name": "train",
        "image": spec.image,
        "command": ["/bin/sh", "-c", script],
        "workingDir": RUN_DIR,
        "env": [{"name": key, "value": value} for key, value in sorted(spec.env.items())],
        # Separate dicts: a shared one would come out of YAML as an anchor and an alias.
        "resources": {"limits": {"google.com/tpu": spec.tpu.chips_per_host}, "requests": {"google.com/tpu": spec.tpu.chips_per_host}},
        "volumeMounts": [{"name": "run-archive", "mountPath": CONFIG_DIR, "readOnly": True}, {"name": "run", "mountPath": RUN_DIR}],
    }
    return {
        "spec": {
            "parallelism": hosts,
            "completions": hosts,
            "backoffLimit": 0,
            "completionMode": "Indexed",
            "template": {
                "metadata": {"labels": dict(_MANAGED_BY)},
                "spec": {
                    "restartPolicy": "Never",
                    # TPU hosts talk to each other over the node's network, as xpk's workloads do.
                    "hostNetwork": True,
                    "dnsPolicy": "ClusterFirstWithHostNet",
                    "nodeSelector": {
                        "cloud.google.com/gke-tpu-accelerator": spec.tpu.gke_accelerator,
                        "cloud.google.com/gke-tpu-topology": spec.tpu.gke_topology,
                    },
                    "containers": [container],
                    "volumes": [{"name": "run-archive", "configMap": {"name": config_map}}, {"name": "run", "emptyDir": {}}],
                },
            },
        }
    }


def to_yaml(objects: list[dict[str, Any]]) -> str:
    """`objects` as one multi-document YAML, in their order and with their keys' order (for `kubectl apply -f -`)."""
    text: str = yaml.safe_dump_all(objects, sort_keys=False)
    return text


def managed_selector() -> str:
    """The label selector of everything tpu_nb creates in a cluster."""
    return ",".join(f"{key}={value}" for key, value in _MANAGED_BY.items())


def pod_selector(name: str) -> str:
    """The label selector of the JobSet `name`'s pods (for `kubectl logs -l` and `kubectl get pods -l`)."""
    return f"jobset.sigs.k8s.io/jobset-name={validate_name(name)}"
