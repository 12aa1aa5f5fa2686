"""The worlds a sweep's trials run in: each a group of the host's chips, bound the documented way, with nothing shared.

One place for every variable that confines a process to its chips, so that a
trial never touches another's. Off-TPU a world is an XLA:CPU world of its own
(`CPU_NUM_DEVICES`), in its own process, so everything is tested here.

torch_xla on a TPU host: one process per world that drives the world's chips
(torch_xla starts `min(chips, process bounds)` processes, so bounds of 1,1,1
give one, and a thread per device in it), from the variables the multi-process
recipe documents for non-communicating processes (Cloud TPU's topology
variables, as in https://gist.github.com/skye/f82ba45d2445bb19d53545538754f9a3,
which torch_xla's maintainers point to, and torch_xla 2.9's own
`_internal/tpu.configure_topology`, which only fills in what is not set):
- `TPU_VISIBLE_CHIPS`: the world's chips (its older name `TPU_VISIBLE_DEVICES` is removed: one integer there
  overrides every process's chips);
- `TPU_CHIPS_PER_PROCESS_BOUNDS`: the shape of the world's chips; `TPU_PROCESS_BOUNDS`: 1,1,1, one process;
- `TPU_PROCESS_PORT` and `TPU_PROCESS_ADDRESSES` (torch_xla's names), `TPU_MESH_CONTROLLER_PORT` and
  `TPU_MESH_CONTROLLER_ADDRESS` (libtpu's): a port of the world's own, so two worlds never bind the same one
  (torch_xla's default is 8476 for every first process);
- `CLOUD_TPU_TASK_ID`: 0, the only process of its world.

TorchTPU: a process per chip (`tpu_nb.workers.processes.chip_ranks`), each placed on the
host chip its world gives it (`TPU_VISIBLE_CHIPS`, set by the rank from its
`ChipRun.host_chips`), in a torch.distributed world of the world's chips alone.

Not testable here (no TPU): the tests check these variables for 1, 4 and 8
chips of every generation against the recipe above.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from tpu_nb.runtime import RuntimeInfo
from tpu_nb.wire.environment import WorkerEnvironment
from tpu_nb.workers.processes.chip_ranks import INHERITED_PLACEMENT, TOPOLOGIES

WORLD_PORTS_FROM = 8476
"""torch_xla's first TPU process port; world N takes the port N after it."""

# The chips of a world as a bounds shape (x, y, z), as torch_xla and libtpu read TPU_CHIPS_PER_PROCESS_BOUNDS:
# a host's chips are 2x2x1 (v4, v5p: 4 chips) or 2x4x1 (v5e, v6e: 8 chips).
CHIP_SHAPES: Mapping[int, str] = MappingProxyType({1: "1,1,1", 2: "1,2,1", 4: "2,2,1", 8: "2,4,1"})
"""Chips in a world -> TPU_CHIPS_PER_PROCESS_BOUNDS."""

# Set for the notebook's process by a platform (Kaggle, Colab) or a launcher: a world inheriting them would be
# placed where they say, not where its world is (the placement a TorchTPU rank drops too, and libtpu's port).
REPLACED = (*INHERITED_PLACEMENT, "TPU_MESH_CONTROLLER_PORT", "TPU_MESH_CONTROLLER_ADDRESS", "CPU_NUM_DEVICES")


class WorldsUnavailable(ValueError):
    """`--cores-per-trial` cannot be given on this host: the message says what can."""


@dataclass(frozen=True, slots=True)
class World:
    """A group of the host's chips that runs one trial at a time."""

    index: int
    chips: tuple[int, ...]
    """The host's chips in it (off-TPU: the XLA:CPU devices it stands for)."""
    devices: int
    """XLA devices its trial sees (its world size under torch_xla)."""
    set: Mapping[str, str]
    """Variables its processes get (besides the run's own)."""
    on_tpu: bool

    def environment(self, planned: WorkerEnvironment) -> WorkerEnvironment:
        """A run's planned environment, confined to this world: its variables set, an inherited placement removed."""
        return WorkerEnvironment(
            set={**planned.set, **self.set},
            remove=tuple(dict.fromkeys([*planned.remove, *REPLACED])),
            notes=planned.notes,
            devices=self.devices,
        )

    @property
    def label(self) -> str:
        """Where the trial runs, for its row: "chip 3", "chips 4-7", "cpu 2"."""
        noun = "chip" if self.on_tpu else "cpu"
        if len(self.chips) == 1:
            return f"{noun} {self.chips[0]}"
        return f"{noun}s {self.chips[0]}-{self.chips[-1]}"


def plan_worlds(info: RuntimeInfo, cores_per_trial: int) -> tuple[World, ...]:
    """The host's worlds of `cores_per_trial` XLA devices each (TorchTPU: chips), in chip order; `WorldsUnavailable` says why not."""
    if cores_per_trial < 1:
        raise WorldsUnavailable(f"--cores-per-trial {cores_per_trial}: give a positive number of cores per trial (default 1).")
    if info.tpu is None:
        if info.pjrt_device != "CPU":
            raise WorldsUnavailable(f"trials run on TPU chips or XLA:CPU; PJRT device {info.pjrt_device} is neither.")
        return _cpu_worlds(info.devices, cores_per_trial)
    per_chip = 1 if info.stack.chosen == "torch_tpu" else info.tpu.devices_per_chip
    chips, rest = divmod(cores_per_trial, per_chip)
    host_chips = info.devices // per_chip
    if rest or chips not in CHIP_SHAPES or chips > host_chips:
        allowed = [count * per_chip for count in CHIP_SHAPES if count <= host_chips]
        raise WorldsUnavailable(
            f"--cores-per-trial {cores_per_trial}: a TPU {info.tpu.generation} host with {host_chips} chips ({per_chip} cores "
            f"each) splits into worlds of {', '.join(map(str, allowed))} cores."
        )
    count = host_chips // chips
    if info.stack.chosen == "torch_tpu":
        known = TOPOLOGIES.get(info.tpu.generation, {})
        if chips > 1 and chips not in known:
            raise WorldsUnavailable(
                f"--cores-per-trial {cores_per_trial}: TorchTPU runs worlds of {', '.join(map(str, sorted({1, *known})))} chips on a TPU "
                f"{info.tpu.generation} host."
            )
        return tuple(World(index, _chips(index, chips), chips, MappingProxyType({}), True) for index in range(count))
    return tuple(
        World(index, _chips(index, chips), cores_per_trial, torch_xla_world(index, _chips(index, chips), info.tpu.generation), True)
        for index in range(count)
    )


def torch_xla_world(index: int, chips: tuple[int, ...], generation: str) -> Mapping[str, str]:
    """The variables that give world `index` the host's `chips` under torch_xla, as one process of its own."""
    port = WORLD_PORTS_FROM + index
    process_bounds = "1,1,1" + (",2" if generation == "v7x" else "")  # torch_xla 2.9 adds v7x's two cores per chip
    return MappingProxyType(
        {
            "TPU_VISIBLE_CHIPS": ",".join(map(str, chips)),
            "TPU_CHIPS_PER_PROCESS_BOUNDS": CHIP_SHAPES[len(chips)],
            "TPU_PROCESS_BOUNDS": process_bounds,
            "TPU_PROCESS_PORT": str(port),
            "TPU_PROCESS_ADDRESSES": f"localhost:{port}",
            "TPU_MESH_CONTROLLER_PORT": str(port),
            "TPU_MESH_CONTROLLER_ADDRESS": f"localhost:{port}",
            "CLOUD_TPU_TASK_ID": "0",
        }
    )


def _cpu_worlds(devices: int, cores_per_trial: int) -> tuple[World, ...]:
    if cores_per_trial > devices:
        raise WorldsUnavailable(
            f"--cores-per-trial {cores_per_trial}: XLA:CPU has {devices} devices here; set CPU_NUM_DEVICES before starting the "
            f"notebook for more, or ask for at most {devices}."
        )
    settings = MappingProxyType({"CPU_NUM_DEVICES": str(cores_per_trial)})
    return tuple(
        World(index, _chips(index, cores_per_trial), cores_per_trial, settings, False) for index in range(devices // cores_per_trial)
    )


def _chips(index: int, size: int) -> tuple[int, ...]:
    return tuple(range(index * size, (index + 1) * size))
