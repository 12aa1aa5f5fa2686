"""A TorchTPU rank loads torch_tpu's backend through torch_tpu's own import and loader (torch-tpu 0.2.0).

Runs only in the TorchTPU environment (`make test-torch-tpu`). Each case is a
fresh process on that environment's Python, started as a rank is: torch's
backend autoloading off (what `%load_ext tpu_nb` sets in the notebook, which
the ranks inherit), torch imported first. Only libtpu's count of chips on the
PCI bus (`hardware.get_tpu_device_count`, which finds none here) is replaced;
torch_tpu's loader, its device registration and its process-group
registration run for real. The device's runtime is lazy (torch_tpu defers
PJRT's start to the first use), so nothing here needs a TPU.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

RANK = """
import json, os, sys
import torch
from torch_tpu._internal.utils import hardware
from torch_tpu import _loader

hardware.get_tpu_device_count = lambda: {found}  # the PCI scan: the only stand-in
initialised = []
real_init = _loader._init_device
_loader._init_device = lambda device: initialised.append(device) or real_init(device)

from tpu_nb.workers.processes.chip_ranks import TORCH_TPU, ChipRun, chip_port, place_rank, rank_environment, start_rank

run = ChipRun.plan(TORCH_TPU, "v6e", {chips}, "eager")
chip_ports = tuple(chip_port() for _ in range({chips}))  # what the ranks agree on through their store
environment = rank_environment(run, {rank}, chip_ports)
try:
    if {chips} == 1:
        start_rank(run, {rank})
    else:  # what start_rank does after the ranks met and before joining the process group, which would start the runtime
        place_rank(run, {rank}, chip_ports)
        TORCH_TPU.load()
except Exception as error:
    print(json.dumps({{"raised": f"{{type(error).__name__}}: {{error}}"}}))
    sys.exit(0)
print(json.dumps({{
    "initialised": initialised,
    "backend": torch._C._get_privateuse1_backend_name(),
    "process_groups": [name for name in ("tpu_dist", "tpu") if name in torch.distributed.Backend.backend_list],
    "device": str(torch.device("tpu:0")),
    "autoload": os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD"),
    "environment": {{name: os.environ.get(name) for name in environment}},
    "inherited": {{name: os.environ[name] for name in ("TPU_VISIBLE_DEVICES", "TPU_HOST_BOUNDS") if name in os.environ}},
}}))
"""

# torch_tpu's own launcher (`set_tpu_launch_env`, single host) in a fresh process, on a v6e host of 8 chips: only
# the PCI scan is replaced. What it sets is what each rank's environment must agree with.
LAUNCHER = """
import json, os
from torch_tpu._internal.utils import hardware
from torch_tpu._internal.distributed import distributed

hardware._scan_pci_tpus = lambda: (8, hardware._V6E_TOPOLOGY)
distributed.set_tpu_launch_env(nproc_per_node={chips})
print(json.dumps({{name: os.environ.get(name) for name in
                  ("TORCH_TPU_TOPOLOGY", "TORCH_TPU_SLICEBUILDER_ADDRESSES", "TORCH_TPU_XPROF_SESSION_ID")}}))
"""


def run_rank(python: str, chips: int, rank: int = 0, found: int | None = None) -> dict:
    """One rank's start in a fresh process, autoloading off as a rank inherits it from the notebook."""
    env = {name: value for name, value in os.environ.items() if name != "PJRT_DEVICE"}
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    # Placed by a platform for the notebook's process: one chip for every process, which a rank must not inherit.
    env["TPU_VISIBLE_DEVICES"] = "3"
    env["TPU_HOST_BOUNDS"] = "1,1,1"  # the host's: stays
    done = subprocess.run(
        [python, "-c", RANK.format(chips=chips, rank=rank, found=chips if found is None else found)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_importing_torch_tpu_with_autoloading_off_registers_nothing_which_is_why_ranks_call_its_loader(torch_tpu_python: str) -> None:
    env = {name: value for name, value in os.environ.items() if name != "PJRT_DEVICE"}
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    code = (
        "import torch, torch_tpu\n"
        "print(torch_tpu._loader._LOADED, torch._C._get_privateuse1_backend_name(), 'tpu_dist' in torch.distributed.Backend.backend_list)"
    )
    done = subprocess.run([torch_tpu_python, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "privateuseone", "False"]


@pytest.mark.parametrize(("chips", "rank"), [(1, 0), (4, 3), (8, 5)])
def test_a_rank_loads_the_tpu_device_and_the_tpu_dist_process_group_through_torch_tpus_loader(
    torch_tpu_python: str, chips: int, rank: int
) -> None:
    loaded = run_rank(torch_tpu_python, chips, rank)
    assert loaded["initialised"] == ["tpu"]  # torch_tpu's own device start, once
    assert loaded["backend"] == "tpu" and loaded["device"] == "tpu:0"
    assert loaded["process_groups"] == ["tpu_dist", "tpu"]
    assert loaded["autoload"] == "0"  # the loader restores what the rank inherited: its own children load nothing
    # The rank's variables, as torch_tpu's runtime reads them after its loader ran (it requires all of these once
    # WORLD_SIZE is set): one chip is a world of one, confined to its chip.
    environment = loaded["environment"]
    assert environment["RANK"] == str(rank) and environment["WORLD_SIZE"] == str(chips)
    assert environment["LOCAL_RANK"] == str(rank) and environment["MASTER_ADDR"] and environment["MASTER_PORT"]
    assert loaded["inherited"] == {"TPU_HOST_BOUNDS": "1,1,1"}  # TPU_VISIBLE_DEVICES=3 would put every rank on chip 3
    # ... and agree with what torch_tpu's own launcher sets for that many processes on the host.
    launcher = launch_env(torch_tpu_python, chips)
    assert environment["TORCH_TPU_TOPOLOGY"] == launcher["TORCH_TPU_TOPOLOGY"]
    assert len(environment["TORCH_TPU_SLICEBUILDER_ADDRESSES"].split(",")) == len(launcher["TORCH_TPU_SLICEBUILDER_ADDRESSES"].split(","))
    assert environment["TORCH_TPU_XPROF_SESSION_ID"].isdigit() and launcher["TORCH_TPU_XPROF_SESSION_ID"].isdigit()


def launch_env(python: str, chips: int) -> dict:
    env = {name: value for name, value in os.environ.items() if not name.startswith("TORCH_TPU_")}
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    done = subprocess.run([python, "-c", LAUNCHER.format(chips=chips)], capture_output=True, text=True, timeout=300, env=env, cwd="/")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_rank_whose_backend_does_not_register_says_why_and_what_to_do(torch_tpu_python: str) -> None:
    loaded = run_rank(torch_tpu_python, chips=1, found=0)  # libtpu sees no chip: torch_tpu's loader registers nothing
    assert loaded["raised"].startswith("BackendNotRegistered: torch_tpu registered no 'tpu' device in this process")
    assert "get_tpu_device_count() is 0" in loaded["raised"] and "Run on a TPU VM" in loaded["raised"]
