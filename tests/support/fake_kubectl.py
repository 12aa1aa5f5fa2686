"""A fake `kubectl` for pod runs on GKE: records every call, runs an applied JobSet's pods as local processes.

- `auth can-i create ...`: FAKE_KUBECTL_CAN_I (default "yes");
- `get nodes --selector=...`: FAKE_KUBECTL_NODES TPU nodes;
- the cluster's objects: a file per object in FAKE_KUBECTL_ROOT/objects (`configmap-NAME`, `jobset-NAME`), made by
  `apply`, removed by `delete`, listed by `get jobsets --selector=...`;
- `apply -f FILE`: keeps the manifests, creates the ConfigMap, then (unless FAKE_KUBECTL_APPLY is "fail", which
  fails there as a rejected JobSet does, or "hang", which waits there forever) the JobSet, whose pods it starts,
  one process per pod (its parallelism):
  the container's `sh -c` script with /tpu_nb_config and /tpu_nb_run moved under
  FAKE_KUBECTL_ROOT/pod-N, the ConfigMap's archive written there, the container's environment with
  JOB_COMPLETION_INDEX and TPU_WORKER_ID as GKE sets them, and PJRT_DEVICE=CPU (no TPU here);
- FAKE_KUBECTL_FAIL="VERB NOUN" (e.g. "get nodes"): that command fails, saying so in bytes that are not UTF-8;
- `get pods --selector=...` (names, or phases with a jsonpath), `logs --follow --selector=...` (every pod's output until they all end),
  `exec POD -- sh -c SCRIPT` (paths moved the same way), `delete jobset|configmap NAME` (ends the pods).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml


def main(argv: list[str]) -> int:
    root = Path(os.environ["FAKE_KUBECTL_ROOT"])
    with (root / "calls.jsonl").open("a") as log:
        log.write(json.dumps(argv) + "\n")
    words = [arg for arg in argv if not arg.startswith("--")]
    if "--" in argv:  # exec POD -- command...
        words = [arg for arg in argv[: argv.index("--")] if not arg.startswith("--")]
    if os.environ.get("FAKE_KUBECTL_FAIL") == " ".join(words[:2]):  # e.g. "get nodes": the cluster cannot be reached
        sys.stderr.buffer.write(b"Unable to connect to the server: \xff dial tcp: i/o timeout\n")
        return 1
    if words[:2] == ["auth", "can-i"]:
        print(os.environ.get("FAKE_KUBECTL_CAN_I", "yes"))
        return 0
    if words[:2] == ["get", "nodes"]:
        for node in range(int(os.environ.get("FAKE_KUBECTL_NODES", "0"))):
            print(f"node/gke-tpu-{node}")
        return 0
    if words[0] == "apply":
        return _apply(root, Path(argv[argv.index("-f") + 1]))
    if words[:2] == ["get", "jobsets"]:
        print("\n".join(f"jobset.jobset.x-k8s.io/{path.name.removeprefix('jobset-')}" for path in sorted(_objects(root).glob("jobset-*"))))
        return 0
    if words[:2] == ["get", "pods"]:
        if "--output=name" in argv:
            print("\n".join(f"pod/{pod.name}" for pod in _pods(root)))
        else:  # --output=jsonpath={.items[*].status.phase}; FAKE_KUBECTL_PENDING: no TPU node frees up
            pending = os.environ.get("FAKE_KUBECTL_PENDING")
            print(" ".join("Pending" if pending else "Running" if _alive(pod) else "Succeeded" for pod in _pods(root)))
        return 0
    if words[0] == "logs":
        return _follow(root)
    if words[0] == "exec":
        pod = root / words[1].removeprefix("pod/")
        script = argv[argv.index("--") + 1 :][-1]
        return subprocess.run(["sh", "-c", _moved(script, pod)]).returncode
    if words[0] == "delete":
        if words[1] == "jobset":
            for pod in _pods(root):
                if pod.name.startswith(f"{words[2]}-workers-"):
                    _end(pod)
        (_objects(root) / f"{words[1]}-{words[2]}").unlink(missing_ok=True)
        print(f"{words[1]} {words[2]} deleted")
        return 0
    print(f"fake kubectl: unsupported command {argv}", file=sys.stderr)
    return 2


def _apply(root: Path, manifest: Path) -> int:
    objects = list(yaml.safe_load_all(manifest.read_text()))
    (root / "applied.yaml").write_text(manifest.read_text())
    config_map = next(item for item in objects if item["kind"] == "ConfigMap")
    archive = config_map["binaryData"]["run.tar.gz"]
    (_objects(root) / f"configmap-{config_map['metadata']['name']}").write_text("")
    print(f"configmap/{config_map['metadata']['name']} created", flush=True)
    jobset = next(item for item in objects if item["kind"] == "JobSet")
    if os.environ.get("FAKE_KUBECTL_APPLY") == "fail":
        print(f'Error from server: error when creating "{manifest}": admission webhook denied the request', file=sys.stderr)
        return 1
    if os.environ.get("FAKE_KUBECTL_APPLY") == "hang":
        time.sleep(3600)
    (_objects(root) / f"jobset-{jobset['metadata']['name']}").write_text("")
    job = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    container = job["template"]["spec"]["containers"][0]
    for index in range(job["parallelism"]):
        pod = root / f"{jobset['metadata']['name']}-workers-0-{index}"
        (pod / "tpu_nb_config").mkdir(parents=True)
        (pod / "tpu_nb_run").mkdir()
        (pod / "tpu_nb_config" / "run.tar.gz").write_bytes(base64.b64decode(archive))
        environment = {**os.environ, **{item["name"]: item["value"] for item in container.get("env", [])}}
        environment.update(JOB_COMPLETION_INDEX=str(index), TPU_WORKER_ID=str(index), PJRT_DEVICE="CPU")
        with (pod / "log").open("w") as log:
            process = subprocess.Popen(
                [container["command"][0], container["command"][1], _moved(container["command"][2], pod)],
                cwd=pod / "tpu_nb_run",
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        (pod / "pid").write_text(str(process.pid))
        print(f"pod/{pod.name} started")
    print(f"jobset.jobset.x-k8s.io/{jobset['metadata']['name']} created")
    return 0


def _objects(root: Path) -> Path:
    objects = root / "objects"
    objects.mkdir(exist_ok=True)
    return objects


def _moved(script: str, pod: Path) -> str:
    return script.replace("/tpu_nb_config", str(pod / "tpu_nb_config")).replace("/tpu_nb_run", str(pod / "tpu_nb_run"))


def _pods(root: Path) -> list[Path]:
    return sorted(path.parent for path in root.glob("*/pid"))


def _alive(pod: Path) -> bool:
    try:
        os.kill(int((pod / "pid").read_text()), 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{(pod / 'pid').read_text()}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _end(pod: Path) -> None:
    try:
        os.killpg(int((pod / "pid").read_text()), signal.SIGKILL)
    except ProcessLookupError:
        pass


def _follow(root: Path) -> int:
    """Every pod's log lines as they come, until every pod has ended."""
    offsets: dict[Path, int] = {}
    while True:
        running = [pod for pod in _pods(root) if _alive(pod)]
        for pod in _pods(root):
            with (pod / "log").open("rb") as log:
                log.seek(offsets.get(pod, 0))
                data = log.read()
            complete = data[: data.rfind(b"\n") + 1]  # whole lines only: a line is never split between two pods
            offsets[pod] = offsets.get(pod, 0) + len(complete)
            sys.stdout.buffer.write(complete)  # bytes as the pods wrote them, like kubectl logs
            sys.stdout.buffer.flush()
        if not running:
            return 0
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
