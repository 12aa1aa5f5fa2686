"""SPMD on 4 virtual XLA:CPU devices: parameters and batches split as intended, the same training as on one device."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import tpu_nb
from tpu_nb.spmd import partition_spec

CORES = 4


def test_the_largest_dimension_the_axis_divides_is_split() -> None:
    assert partition_spec((64, 16), 4) == ("fsdp", None)
    assert partition_spec((1, 64), 4) == (None, "fsdp")
    assert partition_spec((6, 8), 4) == (None, "fsdp")  # 6 is not divisible by 4
    assert partition_spec((3,), 4) is None and partition_spec((), 4) is None
    assert partition_spec((64, 16), 1) is None  # a one-device axis splits nothing


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def make_batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    inputs = torch.randn(10, 32, 16, generator=torch.Generator().manual_seed(1))
    return [(batch, batch.sum(1, keepdim=True).sin()) for batch in inputs]


def train(model: torch.nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]], spmd: bool) -> dict[str, Any]:
    """Ten SGD steps; under SPMD with the model and each batch split over the fsdp axis."""
    import torch_xla

    from tpu_nb import spmd as helpers

    device = torch_xla.device()
    if spmd:
        helpers.shard_model(model)
        loader: Any = helpers.sharded_loader(batches)
    else:
        model.to(device)
        loader = [(inputs.to(device), targets.to(device)) for inputs, targets in batches]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    losses, layouts = [], set()
    for inputs, targets in loader:
        layouts.add(helpers.sharding_of(inputs) if spmd else "")
        loss = (model(inputs) - targets).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch_xla.sync()
        losses.append(loss.item())
    shardings = {name: helpers.sharding_of(parameter) for name, parameter in model.named_parameters()} if spmd else {}
    per_device = helpers.bytes_per_device(model.parameters()) if spmd else 0
    return {"losses": losses, "shardings": shardings, "batch_layouts": layouts, "bytes_per_device": per_device}


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, Any]]:
    model, batches = make_model(), make_batches()
    return {
        "spmd": tpu_nb.launch(train, model, batches, True, spmd=True, cores=CORES, progress=False),
        "one device": tpu_nb.launch(train, model, batches, False, progress=False),
    }


def test_each_parameter_is_split_over_the_four_devices(runs: dict[str, dict[str, Any]]) -> None:
    split_rows, split_columns, whole = "{devices=[4,1]0,1,2,3}", "{devices=[1,4]0,1,2,3}", "{replicated}"
    assert runs["spmd"]["shardings"] == {
        "0.weight": split_rows,  # (64, 16)
        "0.bias": "{devices=[4]0,1,2,3}",
        "2.weight": split_columns,  # (8, 64): 64 is the larger divisible dimension
        "2.bias": "{devices=[4]0,1,2,3}",
        "4.weight": split_columns,  # (1, 8)
        "4.bias": whole,  # (1,): nothing to split
    }


def test_each_batch_is_split_along_its_first_dimension(runs: dict[str, dict[str, Any]]) -> None:
    assert runs["spmd"]["batch_layouts"] == {"{devices=[4,1]0,1,2,3}"}


def test_each_device_holds_a_quarter_of_the_parameters(runs: dict[str, dict[str, Any]]) -> None:
    parameters = sum(parameter.numel() for parameter in make_model().parameters())
    whole_only = 1  # the last bias is on every device
    assert runs["spmd"]["bytes_per_device"] == 4 * ((parameters - whole_only) // CORES + whole_only)


def test_the_loss_is_the_same_as_on_one_device(runs: dict[str, dict[str, Any]]) -> None:
    spmd, single = runs["spmd"]["losses"], runs["one device"]["losses"]
    assert len(spmd) == len(single) == 10
    assert max(abs(a - b) for a, b in zip(spmd, single, strict=True)) < 1e-4
    assert spmd[-1] < spmd[0]
