from __future__ import annotations

import base64
import copy
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tpu_nb.kernel.pod.backends import jobset
from tpu_nb.kernel.pod.backends.jobset import JobSetSpec, manifests, pod_selector, to_yaml, validate_name
from tpu_nb.kernel.pod.backends.slices import SliceError, parse_slice

# The shared reference schemas sit next to the repository (see shared/schemas/README.md).
REPO_ROOT = Path(__file__).resolve().parents[4]
JOBSET_CRD = REPO_ROOT.parent / "shared" / "schemas" / "jobset.x-k8s.io_jobsets.yaml"


def _archive(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _spec(archive: bytes = b"", command: tuple[str, ...] = ("python", "-m", "train"), name: str = "nb-run-1") -> JobSetSpec:
    return JobSetSpec(
        name=name,
        tpu=parse_slice("v5litepod-16"),
        image="us-docker.pkg.dev/example/tpu/train:1",
        command=command,
        env={"TPU_NB_RUN": "1", "PJRT_DEVICE": "TPU"},
        archive=archive or _archive({"main.py": b"print('hi')\n"}),
    )


def _applied(spec: JobSetSpec) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ConfigMap and the JobSet, as kubectl would read them."""
    config_map, job_set = yaml.safe_load_all(to_yaml(manifests(spec)))
    return config_map, job_set


def _pod(job_set: dict[str, Any]) -> dict[str, Any]:
    [workers] = job_set["spec"]["replicatedJobs"]
    pod: dict[str, Any] = workers["template"]["spec"]["template"]
    return pod


@pytest.fixture(scope="module")
def jobset_schema() -> dict[str, Any]:
    # A missing file fails the test: the schema check is the point of it.
    crd = yaml.safe_load(JOBSET_CRD.read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    jsonschema.Draft7Validator.check_schema(schema)
    return schema


def test_the_jobset_passes_the_crd_schema(jobset_schema: dict[str, Any]) -> None:
    _, job_set = _applied(_spec())
    jsonschema.Draft7Validator(jobset_schema).validate(job_set)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "replicatedJobs", 0, "replicas"), "one"),
        (("spec", "replicatedJobs", 0, "template", "spec", "parallelism"), "4"),
        (("spec", "replicatedJobs", 0, "template", "spec", "template", "spec", "containers", 0, "env"), {"A": "1"}),
        (("spec", "failurePolicy", "maxRestarts"), None),
    ],
)
def test_the_schema_check_catches_a_broken_jobset(jobset_schema: dict[str, Any], path: tuple[str | int, ...], value: object) -> None:
    _, job_set = _applied(_spec())
    broken = copy.deepcopy(job_set)
    parent: Any = broken
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(jobset_schema).validate(broken)


def test_the_schema_check_catches_a_container_without_a_name(jobset_schema: dict[str, Any]) -> None:
    _, job_set = _applied(_spec())
    del _pod(job_set)["spec"]["containers"][0]["name"]
    with pytest.raises(jsonschema.ValidationError, match="'name' is a required property"):
        jsonschema.Draft7Validator(jobset_schema).validate(job_set)


def test_the_jobset_runs_one_pod_per_host_on_the_slice() -> None:
    _, job_set = _applied(_spec())
    assert job_set["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert job_set["kind"] == "JobSet"
    assert job_set["metadata"]["name"] == "nb-run-1"
    assert job_set["metadata"]["namespace"] == "default"
    assert job_set["metadata"]["annotations"] == {"alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"}
    assert job_set["spec"]["failurePolicy"] == {"maxRestarts": 0}
    [workers] = job_set["spec"]["replicatedJobs"]
    assert (workers["name"], workers["replicas"]) == ("workers", 1)
    job = workers["template"]["spec"]
    assert job["parallelism"] == job["completions"] == 4
    assert (job["backoffLimit"], job["completionMode"]) == (0, "Indexed")


def test_each_pod_asks_for_its_hosts_chips_on_the_slices_nodes() -> None:
    pod = _pod(_applied(_spec())[1])
    assert pod["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "tpu_nb"}
    spec = pod["spec"]
    assert spec["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "4x4",
    }
    assert (spec["restartPolicy"], spec["hostNetwork"], spec["dnsPolicy"]) == ("Never", True, "ClusterFirstWithHostNet")
    [container] = spec["containers"]
    assert container["name"] == "train"
    assert container["image"] == "us-docker.pkg.dev/example/tpu/train:1"
    assert container["resources"] == {"limits": {"google.com/tpu": 4}, "requests": {"google.com/tpu": 4}}
    assert container["env"] == [{"name": "PJRT_DEVICE", "value": "TPU"}, {"name": "TPU_NB_RUN", "value": "1"}]
    assert container["workingDir"] == "/tpu_nb_run"


def test_the_other_generations_select_their_own_nodes() -> None:
    spec = JobSetSpec("v4-run", parse_slice("v4-32"), "img", ("true",), {}, b"x", namespace="ml")
    config_map, job_set = _applied(spec)
    pod = _pod(job_set)
    assert pod["spec"]["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v4-podslice",
        "cloud.google.com/gke-tpu-topology": "2x2x4",
    }
    assert job_set["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] == 4
    assert config_map["metadata"]["namespace"] == job_set["metadata"]["namespace"] == "ml"


def test_the_config_map_carries_the_archive_into_the_pods() -> None:
    archive = _archive({"main.py": b"print('hi')\n", "data/\u00e9.bin": bytes(range(256))})
    config_map, job_set = _applied(_spec(archive))
    assert config_map["apiVersion"] == "v1"
    assert config_map["kind"] == "ConfigMap"
    assert config_map["metadata"]["name"] == "nb-run-1-run"
    assert config_map["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "tpu_nb"}
    assert base64.b64decode(config_map["binaryData"]["run.tar.gz"], validate=True) == archive
    spec = _pod(job_set)["spec"]
    assert spec["volumes"] == [{"name": "run-archive", "configMap": {"name": "nb-run-1-run"}}, {"name": "run", "emptyDir": {}}]
    assert spec["containers"][0]["volumeMounts"] == [
        {"name": "run-archive", "mountPath": "/tpu_nb_config", "readOnly": True},
        {"name": "run", "mountPath": "/tpu_nb_run"},
    ]


def test_the_container_unpacks_the_archive_then_execs_the_command(tmp_path: Path) -> None:
    archive = _archive({"main.py": b"import sys; print('ran', sys.argv[1:])\n"})
    command = (sys.executable, "main.py", "it's", "two words", "$HOME")
    config_map, job_set = _applied(_spec(archive, command))
    shell, flag, script = _pod(job_set)["spec"]["containers"][0]["command"]
    assert (shell, flag) == ("/bin/sh", "-c")
    # Run the script here, with the two mount points moved under tmp_path.
    config_dir, run_dir = tmp_path / "config", tmp_path / "run"
    config_dir.mkdir()
    run_dir.mkdir()
    (config_dir / "run.tar.gz").write_bytes(base64.b64decode(config_map["binaryData"]["run.tar.gz"]))
    local = script.replace(jobset.CONFIG_DIR, str(config_dir)).replace(jobset.RUN_DIR, str(run_dir))
    done = subprocess.run(
        ["/bin/sh", "-c", local], cwd=run_dir, capture_output=True, text=True, env={**os.environ, "HOME": "/home"}, check=True
    )
    assert done.stdout == "ran [\"it's\", 'two words', '$HOME']\n"


def test_the_yaml_has_two_documents_without_aliases() -> None:
    text = to_yaml(manifests(_spec()))
    assert text.startswith("apiVersion: v1\nkind: ConfigMap\n")
    assert "\n---\napiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\n" in text
    # Shared dicts would be written as &id001 / *id001, which reviewers of the YAML should not have to follow.
    assert "&id" not in text
    assert "*id" not in text


def test_an_archive_too_big_for_a_config_map_is_refused() -> None:
    fits = b"\0" * (900 * 1024 // 4 * 3)
    assert len(manifests(_spec(fits))) == 2
    with pytest.raises(SliceError, match=r"more than the 900 KiB a ConfigMap can carry: keep datasets and checkpoints out"):
        manifests(_spec(fits + b"\0"))


@pytest.mark.parametrize("name", ["Run", "1run", "run_1", "run.1", "run-", "", "r" * 41, "run 1"])
def test_a_bad_name_is_refused_with_the_rules(name: str) -> None:
    with pytest.raises(
        SliceError, match=r"cannot name a JobSet: use at most 40 lower-case letters, digits and '-', starting with a letter"
    ):
        manifests(_spec(name=name))
    with pytest.raises(SliceError):
        pod_selector(name)


@pytest.mark.parametrize("name", ["r", "nb-run-1", "a" * 40, "x1-2-3"])
def test_good_names_pass(name: str) -> None:
    assert validate_name(name) == name


def test_the_pod_selector_matches_jobsets_label() -> None:
    assert pod_selector("nb-run-1") == "jobset.sigs.k8s.io/jobset-name=nb-run-1"
