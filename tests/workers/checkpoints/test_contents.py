"""Reading a checkpoint's files a tensor at a time without unpickling them, and loading them without running anything."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any

import numpy
import pytest
import torch

from tpu_nb.workers.checkpoints.contents import (
    UnsafeCheckpoint,
    checksum,
    digest_of,
    file_checksums,
    flat_tensors,
    load_safely,
    tensor_files,
)


def test_a_safetensors_file_is_checksummed_a_tensor_at_a_time_as_the_tensors_themselves(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    weights = {"encoder.weight": torch.randn(8, 4), "encoder.bias": torch.zeros(8, dtype=torch.bfloat16), "step": torch.tensor(3)}
    save_file(weights, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    assert file_checksums(tmp_path / "model.safetensors") == {name: checksum(tensor) for name, tensor in weights.items()}


def test_a_torch_file_is_checksummed_by_record_and_a_changed_byte_is_caught(tmp_path: Path) -> None:
    state = {"model": {"weight": torch.randn(3, 4)}, "step": 7}
    torch.save(state, tmp_path / "state.pt")
    sums = file_checksums(tmp_path / "state.pt")
    assert sums["data/0"] == digest_of(checksum(state["model"]["weight"])) and "data.pkl" in sums
    raw = bytearray((tmp_path / "state.pt").read_bytes())
    position = raw.find(state["model"]["weight"].numpy().tobytes())
    assert position > 0
    raw[position] ^= 0xFF
    (tmp_path / "state.pt").write_bytes(bytes(raw))
    with pytest.raises(zipfile.BadZipFile, match="Bad CRC-32"):
        file_checksums(tmp_path / "state.pt")


class Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.marker),))


def test_a_file_holding_more_than_tensors_and_plain_values_is_refused_and_nothing_in_it_runs(tmp_path: Path) -> None:
    (tmp_path / "checkpoint-3").mkdir()
    path = tmp_path / "checkpoint-3" / "state.pt"
    torch.save({"step": 3, "rng": Payload(tmp_path / "ran")}, path)
    with pytest.raises(UnsafeCheckpoint, match=r"^checkpoint-3/state.pt holds posix.mkdir, which is not a tensor or a plain value"):
        load_safely(path, mapped=True)
    assert not (tmp_path / "ran").exists()
    torch.save({"step": 3, "python": (3, (1, 2), None), "numpy": numpy.arange(3, dtype=numpy.uint32)}, path)
    with pytest.raises(UnsafeCheckpoint, match="_reconstruct"):
        load_safely(path)  # a NumPy array is not what tpu_nb writes
    from transformers.trainer_pt_utils import safe_globals

    assert list(load_safely(path, safe_globals)["numpy"]) == [0, 1, 2]  # a Trainer's RNG file: transformers' own list


def test_tensor_files_are_those_a_resume_loads_and_nested_tensors_are_named_by_place(tmp_path: Path) -> None:
    for name in ("model.safetensors", "optimizer.pt", "rng_state.pth", "training_args.bin", "trainer_state.json", "tpu_nb.json"):
        (tmp_path / name).write_bytes(b"")
    assert tensor_files(tmp_path) == ["model.safetensors", "optimizer.pt", "rng_state.pth"]  # training_args.bin: never loaded
    state = {"objects": {"optimizer": {"state": {0: {"exp_avg": torch.ones(2)}}, "param_groups": [{"lr": 0.1}]}}, "rng": [torch.zeros(1)]}
    assert [name for name, _tensor in flat_tensors(state)] == ["objects/optimizer/state/0/exp_avg", "rng/0"]
