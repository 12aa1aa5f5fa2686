"""Checkpoints from inside a worker: written in the background, reloaded and checked, pruned, resumed from (on the CPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tpu_nb.wire.checkpoints import LOOP_STATE, CheckpointPlan, Every, list_checkpoints, newest_verified
from tpu_nb.wire.events import CheckpointSaved, History, Notice
from tpu_nb.workers.checkpointing import Checkpointer, CheckpointMismatch, thinned

WORLD = {"world_size": 1, "mesh": None}


class RecordingWriter:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, event: Any) -> None:
        self.sent.append(event)


def train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: range) -> list[tuple[int, dict[str, float]]]:
    """Optimizer steps with made-up gradients: autograd run in this process would break later tests' forked XLA workers."""
    history = []
    for step in steps:
        generator = torch.Generator().manual_seed(step)
        for parameter in model.parameters():
            parameter.grad = torch.randn(parameter.shape, generator=generator)
        optimizer.step()
        optimizer.zero_grad()
        history.append((step, {"loss": 1.0 / (step + 1)}))
    return history


def new_run(
    directory: Path, resume_from: str | None = None, keep: int = 2
) -> tuple[Checkpointer, RecordingWriter, torch.nn.Module, torch.optim.Optimizer]:
    writer = RecordingWriter()
    checkpointer = Checkpointer(CheckpointPlan(str(directory), Every(steps=3), keep, resume_from), writer, WORLD)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    return checkpointer, writer, model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def test_a_loop_checkpoint_is_verified_pruned_and_resumed_to_the_same_weights(tmp_path: Path) -> None:
    checkpointer, writer, model, optimizer = new_run(tmp_path, keep=1)
    assert checkpointer.track({"model": model, "optimizer": optimizer}, rank=0) == 0
    history: list[tuple[int, dict[str, float]]] = []
    for step in range(10):
        history += train(model, optimizer, range(step, step + 1))
        if checkpointer.due(step):
            checkpointer.save(step, list(history))
    checkpointer.wait()
    saved = [event for event in writer.sent if isinstance(event, CheckpointSaved)]
    assert [(event.step, event.verified) for event in saved] == [(0, True), (3, True), (6, True), (9, True)]
    assert saved[-1].stall_seconds < saved[-1].seconds and saved[-1].removed == 1
    assert [checkpoint.step for checkpoint in list_checkpoints(str(tmp_path))] == [9]  # --keep 1
    assert not list(tmp_path.glob("*.partial"))

    uninterrupted = {key: tensor.clone() for key, tensor in model.state_dict().items()}
    _ = train(model, optimizer, range(10, 14))
    expected = {key: tensor.clone() for key, tensor in model.state_dict().items()}

    newest = newest_verified(str(tmp_path))
    assert newest is not None and newest.record is not None and newest.record.history[-1] == (9, history[-1][1])
    resumed, resumed_writer, model, optimizer = new_run(tmp_path, resume_from=newest.path)
    assert resumed.track({"model": model, "optimizer": optimizer}, rank=0) == 10  # the step after the checkpoint
    assert all(torch.equal(model.state_dict()[key], uninterrupted[key]) for key in uninterrupted)
    _ = train(model, optimizer, range(10, 14))  # the optimizer's momentum came back too
    assert all(torch.allclose(model.state_dict()[key], expected[key], atol=1e-6) for key in expected)
    shown = [row for event in resumed_writer.sent if isinstance(event, History) for row in event.rows]
    assert shown == newest.record.history  # the dashboard continues the loss curve
    assert any(isinstance(event, Notice) and "resumed from" in event.text for event in resumed_writer.sent)


def test_resuming_another_model_is_refused_with_the_difference(tmp_path: Path) -> None:
    checkpointer, _writer, model, optimizer = new_run(tmp_path)
    checkpointer.track({"model": model, "optimizer": optimizer}, rank=0)
    train(model, optimizer, range(1))
    checkpointer.save(1, [])
    checkpointer.wait()
    newest = newest_verified(str(tmp_path))
    assert newest is not None
    other = Checkpointer(CheckpointPlan(str(tmp_path), resume_from=newest.path), RecordingWriter(), WORLD)
    bigger = torch.nn.Linear(8, 1)
    with pytest.raises(
        CheckpointMismatch, match=r"1 have other shapes \(weight: \[1, 4\] saved, \[1, 8\] here\): it was saved from another model"
    ):
        other.track({"model": bigger, "optimizer": torch.optim.SGD(bigger.parameters(), lr=0.1)}, rank=0)


def test_a_checkpoint_of_the_starting_weights_fails_its_check_and_the_previous_one_stays_newest(tmp_path: Path) -> None:
    checkpointer, writer, model, optimizer = new_run(tmp_path)
    starting = {key: tensor.clone() for key, tensor in model.state_dict().items()}
    checkpointer.track({"model": model}, rank=0)
    checkpointer.save(0, [])  # step 0: the starting weights are what it should hold
    train(model, optimizer, range(2))
    checkpointer.save(2, [])
    checkpointer.wait()
    model.load_state_dict(starting)  # what a save that lost the training holds
    checkpointer.save(5, [])
    checkpointer.wait()
    failed = [event for event in writer.sent if isinstance(event, CheckpointSaved) and not event.verified]
    assert [event.step for event in failed] == [5] and "equal the starting weights" in (failed[0].problem or "")
    newest = newest_verified(str(tmp_path))
    assert newest is not None and newest.step == 2


def test_a_checkpoint_cut_short_is_found_and_never_counted(tmp_path: Path) -> None:
    checkpointer, _writer, model, optimizer = new_run(tmp_path)
    checkpointer.track({"model": model}, rank=0)
    for step in (1, 2):
        train(model, optimizer, range(step, step + 1))
        checkpointer.save(step, [])
        checkpointer.wait()
    state = tmp_path / "checkpoint-2" / LOOP_STATE
    state.write_bytes(state.read_bytes()[:100])  # cut after it was checked: a sync that stopped, a disk that filled up
    [_first, damaged] = list_checkpoints(str(tmp_path))
    assert not damaged.verified and damaged.state.startswith("damaged since it was saved: state.pt is 100 bytes, was")
    newest = newest_verified(str(tmp_path))
    assert newest is not None and newest.step == 1


def test_a_budget_keeps_fewer_checkpoints_but_always_the_newest(tmp_path: Path) -> None:
    checkpointer, writer, model, optimizer = new_run(tmp_path, keep=3)
    checkpointer.track({"model": model, "optimizer": optimizer}, rank=0)
    for step in (1, 2):
        train(model, optimizer, range(step, step + 1))
        checkpointer.save(step, [])
        checkpointer.wait()
    size = list_checkpoints(str(tmp_path))[-1].record.size  # type: ignore[union-attr]
    checkpointer.plan = CheckpointPlan(str(tmp_path), Every(steps=1), keep=3, budget=2 * size + size // 2)
    train(model, optimizer, range(3, 4))
    checkpointer.save(3, [])
    checkpointer.wait()
    assert [checkpoint.step for checkpoint in list_checkpoints(str(tmp_path))] == [2, 3]  # three would not fit
    checkpointer.plan = CheckpointPlan(str(tmp_path), Every(steps=1), keep=3, budget=size // 2)
    train(model, optimizer, range(4, 5))
    checkpointer.save(4, [])
    checkpointer.wait()
    assert [checkpoint.step for checkpoint in list_checkpoints(str(tmp_path))] == [4]
    assert "over the budget" in writer.sent[-1].text


def test_a_checkpoint_that_cannot_be_written_is_reported_and_the_run_goes_on(tmp_path: Path) -> None:
    checkpointer, writer, model, optimizer = new_run(tmp_path)
    checkpointer.track({"model": model}, rank=0)
    train(model, optimizer, range(1, 2))
    checkpointer.save(1, [])
    checkpointer.wait()
    checkpointer.plan = CheckpointPlan(str(tmp_path / "checkpoint-1" / "state.pt"), Every(steps=1))  # not a directory
    train(model, optimizer, range(2, 3))
    checkpointer.save(2, [])
    checkpointer.wait()
    [failed] = [event for event in writer.sent if isinstance(event, CheckpointSaved) and not event.verified]
    assert failed.step == 2 and "could not be written" in (failed.problem or "")
    newest = newest_verified(str(tmp_path))
    assert newest is not None and newest.step == 1


def test_a_checkpoint_to_a_url_is_written_record_last_and_resumed_from() -> None:
    import fsspec

    checkpointer, _writer, model, optimizer = new_run(Path("unused"))
    checkpointer.plan = CheckpointPlan("memory://bucket/run", Every(steps=1))
    checkpointer.track({"model": model, "optimizer": optimizer}, rank=0)
    train(model, optimizer, range(1))
    checkpointer.save(1, [(1, {"loss": 0.25})])
    checkpointer.wait()
    assert fsspec.filesystem("memory").exists("/bucket/run/checkpoint-1/tpu_nb.json")
    newest = newest_verified("memory://bucket/run")
    assert newest is not None and newest.verified and newest.record is not None and newest.record.loss == 0.25
    resumed, _writer, again, again_optimizer = new_run(Path("unused"), resume_from=newest.path)
    assert resumed.track({"model": again, "optimizer": again_optimizer}, rank=0) == 2
    assert torch.equal(again.weight, model.weight)


def test_a_long_curve_is_thinned_but_keeps_every_evaluation_and_the_last_row() -> None:
    history: list[tuple[int | None, dict[str, float]]] = [(step, {"loss": 1.0 / (step + 1)}) for step in range(10_000)]
    history.insert(5000, (5000, {"eval_loss": 0.3}))
    kept = thinned(history)
    assert len(kept) <= 2002 and (5000, {"eval_loss": 0.3}) in kept and kept[-1] == history[-1]
    assert thinned(history[:100]) == history[:100]
