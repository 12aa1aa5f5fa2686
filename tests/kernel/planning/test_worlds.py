"""A sweep's worlds: the host's chips split into groups, each bound by the documented topology variables, none shared."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys

import pytest
from support.platforms import MakeSystem

from tpu_nb.kernel.planning.worlds import REPLACED, WORLD_PORTS_FROM, World, WorldsUnavailable, plan_worlds
from tpu_nb.runtime import RuntimeInfo, detect
from tpu_nb.runtime.info import TpuInfo
from tpu_nb.wire.environment import WorkerEnvironment

# Generation -> XLA devices per chip under torch_xla (v2 and v3 expose their two TensorCores).
GENERATIONS = {"v2": 2, "v3": 2, "v4": 1, "v5e": 1, "v5p": 1, "v6e": 1, "v7x": 1}


def _host(make_system: MakeSystem, generation: str, chips: int, stack: str = "torch_xla") -> RuntimeInfo:
    info = detect(make_system("kaggle_v5e_8"))
    per_chip = 1 if stack == "torch_tpu" else GENERATIONS[generation]
    tpu = TpuInfo(generation, f"{generation}-{chips}", chips, GENERATIONS[generation], ())
    return dataclasses.replace(info, tpu=tpu, devices=chips * per_chip, stack=dataclasses.replace(info.stack, chosen=stack))


@pytest.mark.parametrize("generation", sorted(GENERATIONS))
@pytest.mark.parametrize("chips", [1, 4, 8])
def test_one_chip_per_trial_gives_each_world_its_chip_its_port_and_one_process(
    make_system: MakeSystem, generation: str, chips: int
) -> None:
    per_chip = GENERATIONS[generation]
    worlds = plan_worlds(_host(make_system, generation, chips), cores_per_trial=per_chip)
    assert [world.chips for world in worlds] == [(chip,) for chip in range(chips)]
    ports = set()
    for world in worlds:
        variables = dict(world.set)
        assert variables["TPU_VISIBLE_CHIPS"] == str(world.chips[0])
        assert variables["TPU_CHIPS_PER_PROCESS_BOUNDS"] == "1,1,1"
        assert variables["TPU_PROCESS_BOUNDS"] == (
            "1,1,1,2" if generation == "v7x" else "1,1,1"
        )  # one process: torch_xla starts min(chips, bounds)
        assert variables["CLOUD_TPU_TASK_ID"] == "0"
        port = int(variables["TPU_PROCESS_PORT"])
        assert variables["TPU_PROCESS_ADDRESSES"] == variables["TPU_MESH_CONTROLLER_ADDRESS"] == f"localhost:{port}"
        assert variables["TPU_MESH_CONTROLLER_PORT"] == str(port)
        ports.add(port)
        assert world.devices == per_chip and world.label == f"chip {world.chips[0]}"
    assert ports == set(range(WORLD_PORTS_FROM, WORLD_PORTS_FROM + chips))


@pytest.mark.parametrize(("chips", "per_trial", "shape"), [(8, 2, "1,2,1"), (8, 4, "2,2,1"), (8, 8, "2,4,1"), (4, 4, "2,2,1")])
def test_groups_of_chips_are_disjoint_and_shaped_as_their_count(make_system: MakeSystem, chips: int, per_trial: int, shape: str) -> None:
    worlds = plan_worlds(_host(make_system, "v5e", chips), cores_per_trial=per_trial)
    assert len(worlds) == chips // per_trial
    seen: list[int] = []
    for world in worlds:
        assert world.set["TPU_CHIPS_PER_PROCESS_BOUNDS"] == shape
        assert math.prod(map(int, shape.split(","))) == len(world.chips) == per_trial
        assert world.set["TPU_VISIBLE_CHIPS"] == ",".join(map(str, world.chips))
        seen += world.chips
    assert seen == list(range(chips))
    assert worlds[-1].label == f"chips {chips - per_trial}-{chips - 1}"


def test_cores_per_trial_that_do_not_split_the_host_say_what_does(make_system: MakeSystem) -> None:
    with pytest.raises(WorldsUnavailable, match=r"splits into worlds of 2, 4, 8 cores"):
        plan_worlds(_host(make_system, "v3", 4), cores_per_trial=3)
    with pytest.raises(WorldsUnavailable, match=r"with 4 chips .* worlds of 1, 2, 4 cores"):
        plan_worlds(_host(make_system, "v4", 4), cores_per_trial=8)
    with pytest.raises(WorldsUnavailable, match="positive number"):
        plan_worlds(_host(make_system, "v4", 4), cores_per_trial=0)


@pytest.mark.parametrize("chips", [1, 4, 8])
def test_torch_tpu_worlds_are_chips_the_ranks_place_themselves_on(make_system: MakeSystem, chips: int) -> None:
    worlds = plan_worlds(_host(make_system, "v6e", chips, stack="torch_tpu"), cores_per_trial=1)
    assert [(world.chips, dict(world.set), world.devices) for world in worlds] == [((chip,), {}, 1) for chip in range(chips)]
    with pytest.raises(WorldsUnavailable, match="TorchTPU runs worlds of 1, 4, 8 chips on a TPU v6e host"):
        plan_worlds(_host(make_system, "v6e", 8, stack="torch_tpu"), cores_per_trial=2)


def test_off_tpu_each_world_is_an_xla_cpu_world_of_its_own(make_system: MakeSystem) -> None:
    info = dataclasses.replace(detect(make_system("cpu_laptop")), devices=4)
    worlds = plan_worlds(info, cores_per_trial=1)
    assert [(world.chips, dict(world.set), world.label) for world in worlds] == [
        ((n,), {"CPU_NUM_DEVICES": "1"}, f"cpu {n}") for n in range(4)
    ]
    [pair] = plan_worlds(dataclasses.replace(info, devices=3), cores_per_trial=2)
    assert (pair.devices, pair.set["CPU_NUM_DEVICES"]) == (2, "2")
    with pytest.raises(WorldsUnavailable, match="CPU_NUM_DEVICES"):
        plan_worlds(info, cores_per_trial=5)


def test_a_world_replaces_an_inherited_placement_and_keeps_the_runs_own_settings() -> None:
    world = World(2, (2,), 1, {"TPU_VISIBLE_CHIPS": "2", "TPU_PROCESS_PORT": "8478"}, True)
    planned = WorkerEnvironment({"PJRT_DEVICE": "TPU", "TPU_VISIBLE_CHIPS": "0"}, ("TPU_PROCESS_ADDRESSES",), ("a note",), 8)
    confined = world.environment(planned)
    assert confined.set == {"PJRT_DEVICE": "TPU", "TPU_VISIBLE_CHIPS": "2", "TPU_PROCESS_PORT": "8478"}
    assert set(confined.remove) == set(REPLACED) | {"TPU_PROCESS_ADDRESSES"}
    assert (confined.notes, confined.devices) == (("a note",), 1)


TOPOLOGY_PROBE = """
import json, os, sys
from torch_xla._internal import tpu
tpu.get_tpu_env = lambda: {"ACCELERATOR_TYPE": "v5litepod-8", "TPU_PROCESS_BOUNDS": "1,1,1", "TPU_CHIPS_PER_PROCESS_BOUNDS": "2,4,1", "WORKER_ID": "0"}
tpu.get_worker_ips = lambda: ["localhost"]
tpu.num_available_chips = lambda: 8
tpu.configure_topology(local_rank=0, local_world_size=1)
names = json.loads(sys.argv[1])
print(json.dumps({"processes": tpu.num_local_processes(), "environ": {name: os.environ.get(name) for name in names}}))
"""


def test_torch_xla_keeps_a_worlds_variables_and_starts_one_process_for_it(make_system: MakeSystem) -> None:
    """torch_xla 2.9's own topology code, as xmp.spawn runs it in each process, with the host's metadata stood in (no TPU here)."""
    world = plan_worlds(_host(make_system, "v5e", 8), cores_per_trial=2)[3]
    environment = {name: value for name, value in os.environ.items() if name not in REPLACED} | dict(world.set) | {"PJRT_DEVICE": "TPU"}
    probe = subprocess.run(
        [sys.executable, "-c", TOPOLOGY_PROBE, json.dumps(sorted(world.set))],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    seen = json.loads(probe.stdout.strip().splitlines()[-1])
    assert seen["environ"] == dict(world.set)
    assert seen["processes"] == 1
