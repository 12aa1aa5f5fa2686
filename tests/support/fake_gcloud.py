"""A fake `gcloud` for pod runs: records every call, simulates a TPU VM slice whose hosts are local processes.

What it simulates (configured by environment variables, see `tests/support/pods.py`):
- `gcloud auth list ...`: the active account (FAKE_GCLOUD_ACCOUNT, empty for none);
- `gcloud compute tpus tpu-vm describe NAME`: the slice FAKE_GCLOUD_TPU with FAKE_GCLOUD_ACCELERATOR and
  FAKE_GCLOUD_HOSTS network endpoints (FAKE_GCLOUD_ENDPOINTS, FAKE_GCLOUD_STATE to say otherwise), else NOT_FOUND;
- `... ssh NAME --worker=all --command=CMD`: CMD run with `bash -c` once per host, each a separate process,
  at the same time, in the host's home directory (FAKE_GCLOUD_ROOT/host-N) with TPU_WORKER_ID=N (unless
  FAKE_GCLOUD_NO_WORKER_ID is set); their
  output relayed line by line (after FAKE_GCLOUD_SAYS, if set: what a host's login prints), the exit code
  the worst of theirs. Like a real ssh session's remote processes, what a host started keeps running if
  this process is killed, until it writes to its closed output;
- `... scp [--recurse] SRC DEST --worker=W`: copies between this machine and the hosts' home directories.
What it does not: networking between hosts (each host's XLA:CPU runtime is a world of its own).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path


def main(argv: list[str]) -> int:
    root = Path(os.environ["FAKE_GCLOUD_ROOT"])
    with (root / "calls.jsonl").open("a") as log:
        log.write(json.dumps(argv) + "\n")
    flags, words = _parse(argv)
    if words[:2] == ["auth", "list"]:
        print(os.environ.get("FAKE_GCLOUD_ACCOUNT", "someone@example.com"))
        return 0
    if words[:3] != ["compute", "tpus", "tpu-vm"]:
        print(f"fake gcloud: unsupported command {argv}", file=sys.stderr)
        return 2
    verb, rest = words[3], words[4:]
    hosts = int(os.environ["FAKE_GCLOUD_HOSTS"])
    name = os.environ["FAKE_GCLOUD_TPU"]
    worker = flags.get("--worker", "0")
    chosen = range(hosts) if worker == "all" else [int(worker)]
    if verb == "describe":
        if rest[0] != name:
            print(f"ERROR: (gcloud.compute.tpus.tpu-vm.describe) NOT_FOUND: {rest[0]}", file=sys.stderr)
            return 1
        state = os.environ.get("FAKE_GCLOUD_STATE", "READY")
        endpoints = int(os.environ.get("FAKE_GCLOUD_ENDPOINTS", hosts))
        described = {"state": state, "acceleratorType": os.environ["FAKE_GCLOUD_ACCELERATOR"], "networkEndpoints": [{}] * endpoints}
        print(json.dumps(described))
        return 0
    if verb == "ssh":
        return _ssh(root, chosen, flags["--command"])
    if verb == "scp":
        source, destination = rest
        for host in chosen:
            _copy(_local(root, host, source, name), _local(root, host, destination, name))
        return 0
    print(f"fake gcloud: unsupported verb {verb}", file=sys.stderr)
    return 2


_VALUED = {"--zone", "--project", "--format", "--filter", "--command", "--worker"}


def _parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """Flags (--name=value or --name value) and the other words, in order."""
    flags: dict[str, str] = {}
    words: list[str] = []
    arguments = iter(argv)
    for arg in arguments:
        if not arg.startswith("--"):
            words.append(arg)
        elif "=" in arg:
            name, value = arg.split("=", 1)
            flags[name] = value
        else:
            flags[arg] = next(arguments) if arg in _VALUED else ""
    return flags, words


def _home(root: Path, host: int) -> Path:
    home = root / f"host-{host}"
    home.mkdir(exist_ok=True)
    return home


def _local(root: Path, host: int, place: str, name: str) -> str:
    """A local path for `place`: NAME:path is under the host's home directory."""
    if place.startswith(f"{name}:"):
        return str(_home(root, host) / place.split(":", 1)[1])
    return place


def _copy(source: str, destination: str) -> None:
    """scp --recurse: into DEST when it is a directory (or ends with /), else as DEST."""
    target = Path(destination)
    if destination.endswith("/") or target.is_dir():
        target = target / Path(source).name
    if Path(source).is_dir():
        shutil.copytree(source, target)
    else:
        shutil.copy(source, target)


def _ssh(root: Path, hosts: range | list[int], command: str) -> int:
    if os.environ.get("FAKE_GCLOUD_SAYS"):
        print(os.environ["FAKE_GCLOUD_SAYS"], flush=True)
    processes = []
    for host in hosts:
        environment = {**os.environ, "HOME": str(_home(root, host)), "TPU_WORKER_ID": str(host)}
        if os.environ.get("FAKE_GCLOUD_NO_WORKER_ID"):  # hosts that cannot tell their number
            del environment["TPU_WORKER_ID"]
        processes.append(
            subprocess.Popen(
                ["bash", "-c", command], cwd=_home(root, host), env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        )
    relays = [
        threading.Thread(target=_relay, args=(pipe, out))
        for process in processes
        for pipe, out in ((process.stdout, sys.stdout.buffer), (process.stderr, sys.stderr.buffer))
    ]
    for relay in relays:
        relay.start()
    for relay in relays:
        relay.join()
    return max(process.wait() for process in processes)


_relay_lock = threading.Lock()


def _relay(pipe: object, out: object) -> None:
    """Bytes as they come, a line at a time (ssh relays whatever a host prints, UTF-8 or not).

    When nobody reads this process's output any more (its kernel died), it dies as ssh does
    (SIGPIPE), which closes the hosts' output: their next write fails, as on a real slice.
    """
    for line in pipe:  # type: ignore[attr-defined]
        with _relay_lock:
            try:
                out.write(line)  # type: ignore[attr-defined]
                out.flush()  # type: ignore[attr-defined]
            except BrokenPipeError:
                os._exit(141)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
