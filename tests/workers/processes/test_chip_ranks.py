"""TorchTPU's ranks: each rank's environment for 1, 4 and 8 chips as torch_tpu's launcher documents it, ports, and the start."""

from __future__ import annotations

import datetime
import multiprocessing
import os
import random
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.torch_tpu_stand_in import STAND_IN

from tpu_nb.workers.processes import chip_ranks
from tpu_nb.workers.processes.chip_ranks import (
    INHERITED_PLACEMENT,
    XPROF_SESSION,
    ChipRun,
    chip_port,
    rank_environment,
    serve_rendezvous,
    start_rank,
)

# torch_tpu checks these when WORLD_SIZE is set (csrc/distributed/slicebuilder/discovery.cc, in this order).
REQUIRED = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCH_TPU_SLICEBUILDER_ADDRESSES", "TORCH_TPU_TOPOLOGY")


@pytest.fixture
def rank_environment_undone() -> Iterator[None]:
    """start_rank writes its rank's variables (and the stand-in its mode) into this process's environment: undone after."""
    before = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(before)


@pytest.mark.parametrize(
    ("generation", "chips", "topology"), [("v5e", 4, "2,2,1"), ("v5e", 8, "2,4,1"), ("v6e", 8, "2,4,1"), ("v4", 8, "2,2,2")]
)
def test_every_rank_gets_the_variables_torch_tpu_requires_with_the_hosts_topology(generation: str, chips: int, topology: str) -> None:
    run = ChipRun.plan(STAND_IN, generation, chips, "fused")
    chip_ports = tuple(chip_port() for _ in range(chips))
    environments = [rank_environment(run, rank, chip_ports) for rank in range(chips)]
    for rank, environment in enumerate(environments):
        assert set(REQUIRED) <= set(environment)
        assert (environment["RANK"], environment["LOCAL_RANK"], environment["WORLD_SIZE"]) == (str(rank), str(rank), str(chips))
        assert environment["TORCH_TPU_TOPOLOGY"] == topology
    addresses = {environment["TORCH_TPU_SLICEBUILDER_ADDRESSES"] for environment in environments}
    assert len(addresses) == 1  # one list, the same for every rank: each takes entry RANK of it
    [listed] = addresses
    assert listed == ",".join(f"localhost:{port}" for port in chip_ports)  # entry RANK is rank RANK's chip
    assert {environment["MASTER_PORT"] for environment in environments} == {str(run.master_port)}


def test_one_chip_is_a_world_of_one_chip_and_an_unknown_count_says_what_the_generation_takes() -> None:
    environment = rank_environment(ChipRun.plan(STAND_IN, "v5e", 1, "eager"), 0, (chip_port(),))
    assert set(REQUIRED) <= set(environment)  # torch_tpu's distributed path, confined to one chip: the others stay free
    assert (environment["RANK"], environment["WORLD_SIZE"], environment["TORCH_TPU_TOPOLOGY"]) == ("0", "1", "1,1,1")
    assert len(environment["TORCH_TPU_SLICEBUILDER_ADDRESSES"].split(",")) == 1
    # v7x: torch_tpu knows no one-chip slice (a chip is two devices), so one process takes the host as a plain process.
    assert set(rank_environment(ChipRun.plan(STAND_IN, "v7x", 1, "eager"), 0, (chip_port(),))) == {XPROF_SESSION}
    with pytest.raises(ValueError, match="TorchTPU runs 1, 4, 8 processes on a TPU v5e host, not 2"):
        rank_environment(ChipRun.plan(STAND_IN, "v5e", 2, "eager"), 0, (chip_port(), chip_port()))


def test_each_launch_has_its_own_profile_session_unless_the_notebook_names_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(XPROF_SESSION, raising=False)
    first, second = (ChipRun.plan(STAND_IN, "v6e", 4, "eager") for _ in range(2))
    assert first.xprof_session != second.xprof_session
    ports = tuple(chip_port() for _ in range(4))
    assert {rank_environment(first, rank, ports)[XPROF_SESSION] for rank in range(4)} == {first.xprof_session}  # one per launch
    monkeypatch.setenv(XPROF_SESSION, "mine")  # set_tpu_launch_env never overwrites it either
    assert rank_environment(ChipRun.plan(STAND_IN, "v6e", 4, "eager"), 2, ports)[XPROF_SESSION] == "mine"


def test_a_rank_drops_the_chip_placement_it_inherited_and_keeps_the_hosts_bounds(
    monkeypatch: pytest.MonkeyPatch, rank_environment_undone: None
) -> None:
    for name in INHERITED_PLACEMENT:
        monkeypatch.setenv(name, "3")  # e.g. TPU_VISIBLE_DEVICES=3 would put every rank on chip 3
    monkeypatch.setenv("TPU_HOST_BOUNDS", "1,1,1")
    start_rank(ChipRun.plan(STAND_IN, "v6e", 1, "eager"), 0)
    assert not any(name in os.environ for name in INHERITED_PLACEMENT)
    assert os.environ["TPU_HOST_BOUNDS"] == "1,1,1" and os.environ["TORCH_TPU_TOPOLOGY"] == "1,1,1"


def test_a_trials_ranks_are_placed_on_their_worlds_chips_and_pick_ports_from_those_chips_shares(
    monkeypatch: pytest.MonkeyPatch, rank_environment_undone: None
) -> None:
    """A sweep's world of chips 2 and 3: rank N on the world's Nth chip, in a torch.distributed world of two, and its
    slice-builder port from its host chip's share, so a trial on chips 0 and 1 never picks the same one."""
    run = ChipRun.plan(STAND_IN, "v4", 2, "eager", host_chips=(2, 3))
    ports = (chip_port(*chip_ranks.port_share(run, 0)), chip_port(*chip_ranks.port_share(run, 1)))
    environments = [rank_environment(run, rank, ports) for rank in range(2)]
    assert [environment["TPU_VISIBLE_CHIPS"] for environment in environments] == ["2", "3"]
    assert {environment["WORLD_SIZE"] for environment in environments} == {"2"}
    assert chip_ranks.port_share(run, 1) == (3, chip_ranks.HOST_CHIPS_MOST)
    other = ChipRun.plan(STAND_IN, "v4", 2, "eager", host_chips=(0, 1))
    mine = [chip_port(*chip_ranks.port_share(run, 0)) for _ in range(10)]
    theirs = [chip_port(*chip_ranks.port_share(other, 0)) for _ in range(10)]
    assert max(theirs) < min(mine)
    run.release()
    other.release()
    monkeypatch.setenv("TPU_VISIBLE_CHIPS", "0")  # the notebook's own placement: the rank's world replaces it
    start_rank(ChipRun.plan(STAND_IN, "v6e", 1, "eager", host_chips=(5,)), 0)
    assert os.environ["TPU_VISIBLE_CHIPS"] == "5"


def test_the_rendezvous_port_is_held_from_the_plan_on_so_nothing_else_can_take_it() -> None:
    run = ChipRun.plan(STAND_IN, "v6e", 4, "eager")
    with socket.socket() as squatter:
        with pytest.raises(OSError):
            squatter.bind(("", run.master_port))  # between the plan and rank 0's store, in any other process too
    with socket.create_connection(("127.0.0.1", run.master_port), timeout=5):
        pass  # already listening: a rank that connects before rank 0 serves waits in the queue, never refused
    run.release()


def test_the_rendezvous_listens_on_loopback_only_so_no_other_host_can_reach_the_ranks_store() -> None:
    # torch.distributed's store has no authentication: on every address, any host reaching the VM could write its keys.
    run = ChipRun.plan(STAND_IN, "v6e", 4, "eager")
    try:
        assert run.rendezvous.getsockname() == ("127.0.0.1", run.master_port)
    finally:
        run.release()


def test_a_chip_port_that_was_taken_is_passed_over_and_each_rank_picks_below_the_ephemeral_range_from_its_own_share() -> None:
    with socket.socket() as squatter:
        squatter.bind(("", 0))
        taken = squatter.getsockname()[1]
        proposals = iter([taken, taken, 29_999])
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(random, "randrange", lambda low, high: next(proposals))
            assert chip_port() == 29_999  # the taken one twice, then a free one
    ephemeral_start = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    end = max(ephemeral_start, chip_ranks.CHIP_PORTS_FROM + 1000)
    picked = [[chip_port(rank, 8) for _ in range(20)] for rank in range(8)]
    assert all(chip_ranks.CHIP_PORTS_FROM <= port < end for ports in picked for port in ports)
    assert all(max(picked[rank]) < min(picked[rank + 1]) for rank in range(7))  # disjoint shares: two ranks never collide


def start_rank_and_sum(rank: int, run: ChipRun, seen: multiprocessing.Queue) -> None:
    """A rank on the stand-in: what it was given, and a sum across the ranks."""
    import torch
    import torch.distributed as dist

    start_rank(run, rank)
    total = torch.ones(1) * (rank + 1)
    dist.all_reduce(total)
    seen.put((rank, os.environ["MASTER_PORT"], os.environ["TORCH_TPU_SLICEBUILDER_ADDRESSES"], float(total)))
    dist.destroy_process_group()


def test_ranks_meet_on_the_held_socket_and_agree_on_a_port_per_chip_passing_over_ports_taken_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = ChipRun.plan(STAND_IN, "v4", 2, "eager")
    share = (chip_ranks._ephemeral_ports_start() - chip_ranks.CHIP_PORTS_FROM) // 2
    lows = [chip_ranks.CHIP_PORTS_FROM + rank * share for rank in range(2)]
    proposed: dict[int, int] = {}

    def lowest_then_next(low: int, high: int) -> int:
        """Each rank first proposes the lowest port of its share (which something on the host holds), then the next."""
        proposed[low] = proposed.get(low, -1) + 1
        return low + proposed[low]

    monkeypatch.setattr(random, "randrange", lowest_then_next)
    with socket.socket() as first, socket.socket() as second:
        first.bind(("", lows[0]))
        second.bind(("", lows[1]))
        seen: multiprocessing.Queue = multiprocessing.get_context("fork").Queue()
        supervisor = supervise(run, start_rank_and_sum, seen)
        results = sorted(seen.get(timeout=120) for _ in range(2))
        supervisor.join(60)
    assert supervisor.exitcode == 0  # every rank ended well
    assert {(port, addresses) for _, port, addresses, _ in results} == {
        (str(run.master_port), f"localhost:{lows[0] + 1},localhost:{lows[1] + 1}")
    }
    assert [total for *_, total in results] == [3.0, 3.0]


def supervise(run: ChipRun, target: Any, seen: multiprocessing.Queue) -> multiprocessing.process.BaseProcess:
    """What the supervisor does, in a process of its own: fork a rank per chip, serve their store, wait for them."""
    fork = multiprocessing.get_context("fork")

    def supervisor() -> None:
        ranks = [fork.Process(target=target, args=(rank, run, seen)) for rank in range(run.chips)]
        for rank in ranks:
            rank.start()
        store = serve_rendezvous(run)
        for rank in ranks:
            rank.join(120)
        del store
        os._exit(0 if all(rank.exitcode == 0 for rank in ranks) else 1)

    process = fork.Process(target=supervisor)
    process.start()
    run.release()  # as the kernel does once it forked the supervisor
    return process


def start_rank_and_leave_at_once_or_read_the_store_after(rank: int, run: ChipRun, seen: multiprocessing.Queue) -> None:
    """Rank 0 joins and ends at once; rank 1 joins, waits until rank 0 has ended, then reads rank 0's port from the store."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    start_rank(run, rank)
    if rank == 0:
        seen.put(os.getpid())
        return  # ends the process (after the queue has sent the pid on)
    first = seen.get(timeout=60)
    while Path(f"/proc/{first}").exists():
        time.sleep(0.05)
    store = TCPStore("127.0.0.1", run.master_port, None, False, timeout=datetime.timedelta(seconds=30))
    seen.put(("after rank 0 ended", int(store.get("tpu_nb/chip_port/0"))))


def test_the_ranks_store_outlives_a_rank_whose_program_ended_first() -> None:
    # Rank 0 serving it (torch's env:// start) took it with it while another rank was still joining, under load.
    run = ChipRun.plan(STAND_IN, "v4", 2, "eager")
    seen: multiprocessing.Queue = multiprocessing.get_context("fork").Queue()
    supervisor = supervise(run, start_rank_and_leave_at_once_or_read_the_store_after, seen)
    supervisor.join(120)
    label, port = seen.get(timeout=5)
    assert supervisor.exitcode == 0 and label == "after rank 0 ended"
    assert chip_ranks.CHIP_PORTS_FROM <= port < chip_ranks._ephemeral_ports_start()


def test_a_single_chip_rank_starts_without_a_process_group_in_its_mode(rank_environment_undone: None) -> None:
    device = start_rank(ChipRun.plan(STAND_IN, "v6e", 1, "compile"), 0)
    assert str(device) == "cpu" and os.environ["TPU_NB_STAND_IN_MODE"] == "compile"
    import torch.distributed as dist

    assert not dist.is_initialized()


def start_traced_rank(trace_dir: str) -> None:
    from torch._logging import trace_structured

    os.environ.pop("TORCH_TRACE", None)
    start_rank(ChipRun.plan(STAND_IN, "v5e", 1, "fused"), 0, Path(trace_dir))
    trace_structured("artifact", metadata_fn=lambda: {"name": "probe", "encoding": "string"}, payload_fn=lambda: "traced")


def test_a_rank_traced_for_the_doctor_writes_torchs_structured_log_where_it_is_told(tmp_path: Path) -> None:
    # In a fork, as a rank is: torch set its log up when this process imported it, without TORCH_TRACE.
    process = multiprocessing.get_context("fork").Process(target=start_traced_rank, args=(str(tmp_path / "trace"),))
    process.start()
    process.join(60)
    assert process.exitcode == 0
    [log] = (tmp_path / "trace").glob("dedicated_log_torch_trace_*.log")
    assert '"name": "probe"' in log.read_text() and "\ttraced" in log.read_text()
