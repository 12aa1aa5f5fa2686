"""TorchTPU's ranks: each rank's environment for 1, 4 and 8 chips as torch_tpu's launcher documents it, ports, and the start."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.torch_tpu_stand_in import STAND_IN

from tpu_nb.workers.chip_ranks import INHERITED_PLACEMENT, XPROF_SESSION, ChipRun, free_ports, rank_environment, start_rank

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
    environments = [rank_environment(run, rank) for rank in range(chips)]
    for rank, environment in enumerate(environments):
        assert set(REQUIRED) <= set(environment)
        assert (environment["RANK"], environment["LOCAL_RANK"], environment["WORLD_SIZE"]) == (str(rank), str(rank), str(chips))
        assert environment["TORCH_TPU_TOPOLOGY"] == topology
    addresses = {environment["TORCH_TPU_SLICEBUILDER_ADDRESSES"] for environment in environments}
    assert len(addresses) == 1  # one list, the same for every rank: each takes entry RANK of it
    [listed] = addresses
    ports = [int(address.removeprefix("localhost:")) for address in listed.split(",")]
    assert len(ports) == chips and len(set(ports) | {run.master_port}) == chips + 1  # a port per chip, and the rendezvous's


def test_one_chip_is_a_world_of_one_chip_and_an_unknown_count_says_what_the_generation_takes() -> None:
    environment = rank_environment(ChipRun.plan(STAND_IN, "v5e", 1, "eager"), 0)
    assert set(REQUIRED) <= set(environment)  # torch_tpu's distributed path, confined to one chip: the others stay free
    assert (environment["RANK"], environment["WORLD_SIZE"], environment["TORCH_TPU_TOPOLOGY"]) == ("0", "1", "1,1,1")
    assert len(environment["TORCH_TPU_SLICEBUILDER_ADDRESSES"].split(",")) == 1
    # v7x: torch_tpu knows no one-chip slice (a chip is two devices), so one process takes the host as a plain process.
    assert set(rank_environment(ChipRun.plan(STAND_IN, "v7x", 1, "eager"), 0)) == {XPROF_SESSION}
    with pytest.raises(ValueError, match="TorchTPU runs 1, 4, 8 processes on a TPU v5e host, not 2"):
        rank_environment(ChipRun.plan(STAND_IN, "v5e", 2, "eager"), 0)


def test_each_launch_has_its_own_profile_session_unless_the_notebook_names_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(XPROF_SESSION, raising=False)
    first, second = (ChipRun.plan(STAND_IN, "v6e", 4, "eager") for _ in range(2))
    assert first.xprof_session != second.xprof_session
    assert {rank_environment(first, rank)[XPROF_SESSION] for rank in range(4)} == {first.xprof_session}  # one per launch
    monkeypatch.setenv(XPROF_SESSION, "mine")  # set_tpu_launch_env never overwrites it either
    assert rank_environment(ChipRun.plan(STAND_IN, "v6e", 4, "eager"), 2)[XPROF_SESSION] == "mine"


def test_a_rank_drops_the_chip_placement_it_inherited_and_keeps_the_hosts_bounds(
    monkeypatch: pytest.MonkeyPatch, rank_environment_undone: None
) -> None:
    for name in INHERITED_PLACEMENT:
        monkeypatch.setenv(name, "3")  # e.g. TPU_VISIBLE_DEVICES=3 would put every rank on chip 3
    monkeypatch.setenv("TPU_HOST_BOUNDS", "1,1,1")
    start_rank(ChipRun.plan(STAND_IN, "v6e", 1, "eager"), 0)
    assert not any(name in os.environ for name in INHERITED_PLACEMENT)
    assert os.environ["TPU_HOST_BOUNDS"] == "1,1,1" and os.environ["TORCH_TPU_TOPOLOGY"] == "1,1,1"


def test_free_ports_are_distinct() -> None:
    ports = free_ports(9)
    assert len(set(ports)) == 9 and all(0 < port < 65536 for port in ports)


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
