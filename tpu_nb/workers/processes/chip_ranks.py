"""TorchTPU's ranks: one worker process per chip, each given its chip's environment before its TPU runtime starts.

torch_tpu binds a process to its chip when its runtime starts (at the first
device use), from the variables a launcher sets: the process's place in the
world (`RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`) and
the host's chips (`TORCH_TPU_SLICEBUILDER_ADDRESSES`: one localhost port per
chip; `TORCH_TPU_TOPOLOGY`: what `torch.tpu.distributed.set_tpu_launch_env`
gives for that many chips of that generation), and the launch's profile
session (`TORCH_TPU_XPROF_SESSION_ID`). One chip is a world of one chip, as
`set_tpu_launch_env(nproc_per_node=1)` makes it: without those variables
torch_tpu would open every chip of the host while using one. A process forked after the
runtime started is refused ("cannot access or re-initialize TPU in a forked
subprocess"), so the supervisor forks one per chip from a process that never
used the device; each sets its variables, loads torch_tpu's backend, sets
the execution mode, joins the process group ("tpu_dist") and sees its chip as
`tpu:0`. Written from torch-tpu 0.2.0's sources.

Ports are never probed in one process and bound seconds later in another
(torch_tpu's launcher does that, with portpicker): the rendezvous's socket
is bound (on the loopback address only: the store has no authentication)
and listening from the plan on, and the supervisor serves
torch.distributed's store from it once it forked the ranks (so the store
outlives every rank); each rank picks its chip's port
itself, from below the host's ephemeral range (where no outgoing connection
or `bind(port 0)` lands by chance), checked free and tried again if taken,
and the ranks agree on the list through the store before torch_tpu loads
and reads it.

A `ChipStack` says how a rank loads its backend, which device, process-group
backend, mode switch and event it uses: `TORCH_TPU` on a TPU; any other
`ChipStack` (a CPU device with gloo) runs the same ranks where there is no TPU.
"""

from __future__ import annotations

import datetime
import os
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tpu_nb.workers.readings.device_readings import CompileReading, DeviceEvent

ExecutionMode = Literal["eager", "fused", "compile"]
EXECUTION_MODES: tuple[ExecutionMode, ...] = ("eager", "fused", "compile")
RENDEZVOUS_TIMEOUT = datetime.timedelta(minutes=10)
"""How long a rank waits for the others to join, and in a collective (torch's default is 30 min)."""

# What `set_tpu_launch_env(nproc_per_node=N)` gives as TORCH_TPU_TOPOLOGY (torch_tpu/_internal/utils/hardware.py,
# 0.2.0's open-source build), by generation and chips on the host.
TOPOLOGIES: dict[str, dict[int, str]] = {
    "v5e": {1: "1,1,1", 4: "2,2,1", 8: "2,4,1"},
    "v6e": {1: "1,1,1", 4: "2,2,1", 8: "2,4,1"},
    "v4": {1: "1,1,1", 2: "1,2,1", 4: "2,2,1", 8: "2,2,2"},
    "v5p": {1: "1,1,1", 2: "1,2,1", 4: "2,2,1", 8: "2,2,2"},
    "v7x": {2: "1,1,1,2", 4: "1,2,1,2", 8: "2,2,1,2"},
}


# Variables that place one process among a host's chips, read by libtpu and torch_tpu's runtime
# (GetDistributedWorkerConfiguration in torch_tpu's C++ glue): a platform or a launcher may have set them for
# the notebook's own process, and a rank inheriting them would take their chip (TPU_VISIBLE_DEVICES holding one
# integer overrides every rank's), not its own. Each rank removes them; the host's bounds (TPU_HOST_BOUNDS,
# TPU_CHIPS_PER_HOST_BOUNDS) describe the host, not a process, and stay.
INHERITED_PLACEMENT = (
    "TPU_VISIBLE_DEVICES",
    "TPU_VISIBLE_CHIPS",
    "TPU_PROCESS_BOUNDS",
    "TPU_CHIPS_PER_PROCESS_BOUNDS",
    "TPU_PROCESS_PORT",
    "TPU_PROCESS_ADDRESSES",
    "CLOUD_TPU_TASK_ID",
)
XPROF_SESSION = "TORCH_TPU_XPROF_SESSION_ID"


@dataclass(frozen=True, slots=True)
class ChipStack:
    """How a rank reaches its chip: what loads the backend that registers the device, the device, the process group's
    backend, how to set the execution mode, the event that says a copy to the host is done, and the compile readings."""

    load: Callable[[], None]
    device: str
    process_group: str
    set_mode: Callable[[ExecutionMode], None]
    make_event: Callable[[], DeviceEvent]
    read_compiles: Callable[[], CompileReading]


@dataclass(frozen=True, slots=True)
class ChipRun:
    """A TorchTPU run on this host: a process per chip."""

    stack: ChipStack
    generation: str
    chips: int
    mode: ExecutionMode
    xprof_session: str  # groups the ranks' profiles of this launch
    rendezvous: socket.socket = field(repr=False)
    """Bound and listening on this host from the plan on: the supervisor serves the ranks' store from it."""
    master_port: int
    """The rendezvous's port (MASTER_PORT)."""
    host_chips: tuple[int, ...] | None = None
    """A sweep's trial: the host's chips its world has, rank N on the Nth (None: the host's first `chips`)."""

    @classmethod
    def plan(cls, stack: ChipStack, generation: str, chips: int, mode: ExecutionMode, host_chips: tuple[int, ...] | None = None) -> ChipRun:
        """A run of `chips` processes, holding the rendezvous's port from now until the supervisor serves from it.

        Its profile session is new for each launch, as `set_tpu_launch_env` makes one, unless the notebook's
        environment names one (which that function never overwrites either).
        """
        session = os.environ.get(XPROF_SESSION) or str(time.time_ns())
        rendezvous = listening_socket()
        return cls(stack, generation, chips, mode, session, rendezvous, int(rendezvous.getsockname()[1]), host_chips)

    def release(self) -> None:
        """Close this process's copy of the rendezvous's socket (the kernel once it forked the supervisor; each rank)."""
        self.rendezvous.close()


def listening_socket() -> socket.socket:
    """A TCP socket listening on a port the system chose, on the loopback address only, where the ranks connect.

    torch.distributed's store authenticates nobody: bound to every address, any host that reaches the VM (GCP's
    default network lets the project's other machines in) could write the ranks' keys for the whole run.
    """
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    return listener


CHIP_PORTS_FROM = 20000  # above the well-known services' usual ports
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def chip_port(rank: int = 0, chips: int = 1, attempts: int = 100) -> int:
    """A TCP port free on this host now, for rank `rank`'s chip (torch_tpu's slice builder binds it inside libtpu).

    No socket of ours can be handed to libtpu. So the port comes from below
    the host's ephemeral range, where nothing takes it by chance in the
    moment before (outgoing connections and `bind(port 0)` take ports only
    from that range); a port something already holds is passed over; and
    each rank picks from its own share of the range, so two never pick the same.
    """
    start = _ephemeral_ports_start()
    share = (start - CHIP_PORTS_FROM) // chips
    low = CHIP_PORTS_FROM + rank * share
    for _ in range(attempts):
        port = random.randrange(low, low + share)
        with socket.socket() as probe:
            try:
                probe.bind(("", port))
            except OSError:
                continue  # taken: try another
            return port
    raise RuntimeError(f"no free TCP port for chip {rank}'s slice builder in {attempts} tries between {low} and {low + share}")


def _ephemeral_ports_start() -> int:
    try:
        return max(int(EPHEMERAL_RANGE.read_text().split()[0]), CHIP_PORTS_FROM + 1000)
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def rank_environment(run: ChipRun, rank: int, chip_ports: tuple[int, ...]) -> dict[str, str]:
    """The variables rank `rank` sets before its runtime starts: its place in the world, the rendezvous, the host's chips.

    `chip_ports`: every chip's slice-builder port, in rank order (the ranks agree on them: `agree_on_chip_ports`).
    One chip too: a world of one, which torch_tpu confines to its chip (the host's others stay free), except
    where torch_tpu knows no one-chip slice (v7x, whose chip is two devices): a plain process there, which
    torch_tpu gives the whole host.
    """
    topology = _topology(run)
    # A trial's world: the rank's own chip of the host (libtpu's TPU_VISIBLE_CHIPS), the world alone in its topology.
    placed = {} if run.host_chips is None else {"TPU_VISIBLE_CHIPS": str(run.host_chips[rank])}
    if topology is None:
        return {XPROF_SESSION: run.xprof_session, **placed}
    return {
        **placed,
        "WORLD_SIZE": str(run.chips),
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(run.chips),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(run.master_port),
        "TORCH_TPU_SLICEBUILDER_ADDRESSES": ",".join(f"localhost:{port}" for port in chip_ports),
        "TORCH_TPU_TOPOLOGY": topology,
        XPROF_SESSION: run.xprof_session,
    }


def _topology(run: ChipRun) -> str | None:
    """torch_tpu's TORCH_TPU_TOPOLOGY for this run; None for a plain one-chip process (v7x)."""
    topology = TOPOLOGIES.get(run.generation, {}).get(run.chips)
    if topology is None and run.chips > 1:
        counts = ", ".join(map(str, TOPOLOGIES.get(run.generation, {}))) or "none known to tpu_nb"
        raise ValueError(f"TorchTPU runs {counts} processes on a TPU {run.generation} host, not {run.chips}")
    return topology


def serve_rendezvous(run: ChipRun) -> Any:
    """In the supervisor, once it forked the ranks: torch.distributed's store for them, served from the run's socket.

    Not in rank 0: a rank whose program ends first would take the store with
    it while another still reads from it to join ("Connection reset by
    peer", seen under load). The supervisor outlives every rank. Keep the
    returned store referenced until they have all ended.
    """
    from torch.distributed import TCPStore  # type: ignore[attr-defined]  # re-exported from torch._C, without __all__

    # The store's server takes the socket's descriptor over (and closes it when done): ours lets go of it.
    listening = run.rendezvous.detach()
    return TCPStore(
        "127.0.0.1", run.master_port, None, True, timeout=RENDEZVOUS_TIMEOUT, wait_for_workers=False, master_listen_fd=listening
    )


def rendezvous_store(run: ChipRun) -> Any:
    """In a rank: its connection to the ranks' store (the supervisor serves it)."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    run.release()  # the supervisor's to serve from
    return TCPStore("127.0.0.1", run.master_port, run.chips, False, timeout=RENDEZVOUS_TIMEOUT)


HOST_CHIPS_MOST = 8
"""The most chips a TPU host has: a sweep's worlds share the port range out among that many."""


def port_share(run: ChipRun, rank: int) -> tuple[int, int]:
    """Which share of the port range rank `rank` picks from, of how many: a trial's rank by its host chip, so two worlds never meet."""
    if run.host_chips is None:
        return rank, run.chips
    return run.host_chips[rank], HOST_CHIPS_MOST


def agree_on_chip_ports(store: Any, run: ChipRun, rank: int) -> tuple[int, ...]:
    """Every chip's slice-builder port, in rank order: each rank picks its own and reads the others' from the store."""
    store.set(f"tpu_nb/chip_port/{rank}", str(chip_port(*port_share(run, rank))))
    keys = [f"tpu_nb/chip_port/{other}" for other in range(run.chips)]
    store.wait(keys)
    return tuple(int(store.get(key)) for key in keys)


def place_rank(run: ChipRun, rank: int, chip_ports: tuple[int, ...]) -> None:
    """Give this process rank `rank`'s place among the host's chips: its variables set, an inherited placement removed."""
    environment = rank_environment(run, rank, chip_ports)
    for name in INHERITED_PLACEMENT:
        os.environ.pop(name, None)
    os.environ.update(environment)


def start_rank(run: ChipRun, rank: int, trace_dir: Path | None = None) -> Any:
    """In rank `rank`'s process: meet the others, set its environment, load the stack, set the mode, join; its device.

    `trace_dir`: where torch_tpu traces what it compiles, for the doctor (TORCH_TRACE, read when it loads; a
    user's own TORCH_TRACE wins).
    """
    import torch

    if run.chips > 1:
        store = rendezvous_store(run)
        chip_ports = agree_on_chip_ports(store, run, rank)
    else:
        chip_ports = (chip_port(*port_share(run, rank)),)
        run.release()  # no store for a world of one: MASTER_PORT is only named (the supervisor lets go of it too)
    place_rank(run, rank, chip_ports)  # before torch_tpu loads: its runtime reads them once, then
    if trace_dir is not None and "TORCH_TRACE" not in os.environ:
        os.environ["TORCH_TRACE"] = str(trace_dir)
        _restart_torch_trace()
    run.stack.load()
    run.stack.set_mode(run.mode)
    if run.chips > 1:
        import torch.distributed as dist

        dist.init_process_group(run.stack.process_group, store=store, rank=rank, world_size=run.chips, timeout=RENDEZVOUS_TIMEOUT)
    return torch.device(run.stack.device)


def _restart_torch_trace() -> None:
    """Make torch's structured log (already set up when the notebook imported torch) follow TORCH_TRACE, in this rank.

    torch reads TORCH_TRACE once, at import, into a lazy handler that opens
    its file at the first record; a fresh one now writes where this rank's
    TORCH_TRACE says, and torch_tpu traces into it from its load on.
    """
    import torch._logging._internal as torch_logging

    torch_logging.LOG_TRACE_HANDLER = None
    torch_logging._init_logs()


def load_torch_tpu() -> None:
    """Load torch_tpu's backend in this rank: the `tpu` device and the `tpu_dist` process group.

    `%load_ext tpu_nb` turned torch's backend autoloading off in the notebook
    (TORCH_DEVICE_BACKEND_AUTOLOAD=0, kernel/tpu/torch_tpu_guard.py), and the rank
    inherits that: importing torch_tpu then registers nothing. So the rank
    calls torch_tpu's own loader, `torch_tpu._loader.load` (what torch's
    `torch.backends` entry point names), as autoloading would have; it
    registers the backend when libtpu counts a chip on the PCI bus.
    """
    import torch
    import torch.distributed as dist
    from torch_tpu import _loader  # type: ignore[import-not-found]  # only in TorchTPU's environment

    _loader.load()
    if torch._C._get_privateuse1_backend_name() != "tpu" or "tpu_dist" not in dist.Backend.backend_list:
        raise BackendNotRegistered(
            "torch_tpu registered no 'tpu' device in this process: its loader found no TPU chip on the PCI bus "
            "(torch_tpu._internal.utils.hardware.get_tpu_device_count() is 0). Run on a TPU VM, or give this container the "
            "host's /sys/bus/pci and its TPU devices (/dev/vfio or /dev/accel*), then run the cell again."
        )


class BackendNotRegistered(RuntimeError):
    """torch_tpu loaded but registered no TPU device: the rank cannot start (said in the cell with the fix)."""


def _set_torch_tpu_mode(mode: ExecutionMode) -> None:
    """torch_tpu's eager mode, set after it loaded (its TORCH_TPU_DEFER_AND_FUSE variable is read once, at load).

    compile: strict eager around the graphs torch.compile(backend="tpu") makes.
    """
    tpu = _torch_tpu()
    tpu.eager_mode = tpu.EagerMode.DEFER_AND_FUSE if mode == "fused" else tpu.EagerMode.DEFER_NEVER


def _torch_tpu_event() -> DeviceEvent:
    return _torch_tpu().Event()  # type: ignore[no-any-return]


def _torch_tpu() -> Any:
    """`torch.tpu`, the device module torch_tpu registers when it loads on a TPU host."""
    import torch

    return torch.tpu  # type: ignore[attr-defined]


def torch_tpu_compile_reading() -> CompileReading:
    """torch_tpu's compilations so far, from its compilation cache's statistics (zero where this build has none).

    `torch.tpu._get_cache_stats` is private and version-gated: read through
    `cache_stats`, which refuses a format it does not know.
    """
    from tpu_nb.workers.doctor.torch_tpu_readings import cache_stats

    read = getattr(_torch_tpu(), "_get_cache_stats", None)
    stats = cache_stats(read()) if read is not None else None
    if stats is None:
        return CompileReading(0, 0.0, 0, 0)
    # Counted once finished: a compilation still running is not in the statistics.
    return CompileReading(stats.compilations, stats.compile_seconds, stats.compilations, stats.compilations)


TORCH_TPU = ChipStack(load_torch_tpu, "tpu:0", "tpu_dist", _set_torch_tpu_mode, _torch_tpu_event, torch_tpu_compile_reading)
