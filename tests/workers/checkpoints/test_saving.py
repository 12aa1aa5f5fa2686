"""Checkpoints from inside a worker: written in the background, reloaded and checked, pruned, resumed from (on the CPU)."""

from __future__ import annotations

import json
import os
import struct
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch

from tpu_nb.wire.checkpoints import LOOP_STATE, RECORD, CheckpointPlan, Every, list_checkpoints, newest_verified
from tpu_nb.wire.events import CheckpointSaved, History, Notice
from tpu_nb.workers.checkpoints.saving import Checkpointer, CheckpointMismatch, CheckpointUnusable, thinned

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
    other = Checkpointer(CheckpointPlan(str(tmp_path), Every(steps=3), keep=2, resume_from=newest.path), RecordingWriter(), WORLD)
    bigger = torch.nn.Linear(8, 1)
    with pytest.raises(
        CheckpointMismatch, match=r"1 have other shapes \(weight: \[1, 4\] saved, \[1, 8\] here\): it was saved from another model"
    ):
        other.track({"model": bigger, "optimizer": torch.optim.SGD(bigger.parameters(), lr=0.1)}, rank=0)


def test_only_rank_0_which_saves_copies_its_starting_weights_to_the_host_for_their_checksums(tmp_path: Path) -> None:
    """With a process per device every rank tracks its model; the checksums, a copy of every weight, serve rank 0's saves."""
    started = {}
    for rank in (0, 1):
        checkpointer, _writer, model, optimizer = new_run(tmp_path / str(rank))
        assert checkpointer.track({"model": model, "optimizer": optimizer}, rank=rank) == 0
        started[rank] = checkpointer.start_checksums
    assert started[0] is not None and set(started[0]) == {"weight", "bias"}
    assert started[1] is None


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


def tied_model() -> torch.nn.Module:
    """An embedding tied to the output layer, as Llama 3.2's and Gemma's are: 1 MB of weights under two names."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(1000, 256), torch.nn.Linear(256, 1000))
    model[1].weight = model[0].weight
    return model


def test_a_tied_weight_is_saved_once_checked_and_resumed_tied(tmp_path: Path) -> None:
    writer = RecordingWriter()
    checkpointer = Checkpointer(CheckpointPlan(str(tmp_path), Every(steps=3), 2), writer, WORLD)
    model = tied_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    checkpointer.track({"model": model, "optimizer": optimizer}, rank=0)
    history = train(model, optimizer, range(1))
    checkpointer.save(0, history)
    checkpointer.wait()
    [saved] = [event for event in writer.sent if isinstance(event, CheckpointSaved)]
    state_bytes = 1000 * 256 * 4 + 1000 * 4
    assert saved.verified, saved.problem
    assert saved.size < 1.1 * state_bytes, f"{saved.size:,} bytes on disk for a state of {state_bytes:,}"
    newest = newest_verified(str(tmp_path))
    assert newest is not None
    resumed = Checkpointer(CheckpointPlan(str(tmp_path), Every(steps=3), 2, newest.path), RecordingWriter(), WORLD)
    again = tied_model()
    resumed.track({"model": again, "optimizer": torch.optim.SGD(again.parameters(), lr=0.1)}, rank=0)
    assert again[1].weight is again[0].weight and torch.equal(again[0].weight, model[0].weight)


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
    checkpointer.plan = CheckpointPlan(str(tmp_path / "checkpoint-1" / "state.pt"), Every(steps=1), keep=2)  # not a directory
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
    checkpointer.plan = CheckpointPlan("memory://bucket/run", Every(steps=1), keep=2)
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


class Unpicklable:
    """A tracked object whose state cannot be pickled (it holds a function made inside another): its saves fail."""

    def __init__(self) -> None:
        self.broken = True

    def state_dict(self) -> dict[str, Any]:
        return {"hook": (lambda: 0) if self.broken else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def test_a_save_that_fails_with_anything_is_reported_and_the_next_one_is_tried(tmp_path: Path) -> None:
    checkpointer, writer, model, optimizer = new_run(tmp_path)
    extra = Unpicklable()
    checkpointer.track({"model": model, "extra": extra}, rank=0)
    train(model, optimizer, range(1, 2))
    checkpointer.save(1, [])
    checkpointer.wait()  # the save thread ended: with a report, not silently
    [failed] = [event for event in writer.sent if isinstance(event, CheckpointSaved)]
    assert failed.step == 1 and not failed.verified
    # Python 3.11 says "Can't pickle local object", 3.13 "Can't get local object": the object is named in both.
    assert (
        failed.problem is not None and failed.problem.startswith("it could not be written (") and "Unpicklable.state_dict" in failed.problem
    )
    assert list_checkpoints(str(tmp_path)) == [] and not list(tmp_path.iterdir())  # nothing half-written left
    extra.broken = False
    train(model, optimizer, range(2, 3))
    checkpointer.save(2, [])
    checkpointer.wait()
    assert [(event.step, event.verified) for event in writer.sent if isinstance(event, CheckpointSaved)] == [(1, False), (2, True)]


class Payload:
    """What someone who can write to a shared checkpoint directory could leave there: unpickling it makes `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.marker),))


def forge(directory: Path, step: int, state: dict[str, Any], like: Path) -> None:
    """A checkpoint-`step` holding `state`, with a record that vouches for it (copied from the one in `like`, sizes right)."""
    forged = directory / f"checkpoint-{step}"
    forged.mkdir()
    torch.save(state, forged / LOOP_STATE)
    record = json.loads((like / RECORD).read_text())
    record.update(step=step, files={LOOP_STATE: (forged / LOOP_STATE).stat().st_size})
    record["checksums"] = {}  # none that could be checked
    (forged / RECORD).write_text(json.dumps(record))


def test_a_checkpoint_holding_a_pickled_payload_is_passed_over_and_nothing_in_it_runs(tmp_path: Path) -> None:
    checkpointer, _writer, model, optimizer = new_run(tmp_path)
    checkpointer.track({"model": model, "optimizer": optimizer}, rank=0)
    train(model, optimizer, range(1))
    checkpointer.save(1, [])
    checkpointer.wait()
    marker = tmp_path.parent / f"{tmp_path.name}-payload-ran"
    forge(tmp_path, 999, {"objects": {"model": model.state_dict()}, "rng": Payload(marker), "step": 999}, tmp_path / "checkpoint-1")
    newest = newest_verified(str(tmp_path))
    assert newest is not None and newest.step == 999  # its record and sizes look right: the kernel picks it

    resumed, writer, again, again_optimizer = new_run(tmp_path, resume_from=newest.path)
    assert resumed.track({"model": again, "optimizer": again_optimizer}, rank=0) == 2  # from checkpoint-1
    assert not marker.exists()
    [said] = [event.text for event in writer.sent if isinstance(event, Notice)]
    assert said.startswith(f"resumed from {tmp_path}/checkpoint-1 (step 1); passed over checkpoint-999: checkpoint-999/state.pt holds ")
    assert "posix.mkdir, which is not a tensor or a plain value: it was not loaded" in said

    (tmp_path / "checkpoint-1" / LOOP_STATE).unlink()  # nothing else to fall back on
    refused, _writer, again, again_optimizer = new_run(tmp_path, resume_from=newest.path)
    with pytest.raises(CheckpointUnusable, match=r"no checkpoint there can be trusted \(checkpoint-999: checkpoint-999/state.pt holds"):
        refused.track({"model": again, "optimizer": again_optimizer}, rank=0)
    assert not marker.exists()


def flip_bytes_in_a_record(path: Path) -> None:
    """Change a few bytes of the first tensor stored in a torch file, its size intact (a bad sector, a sync gone wrong)."""
    with zipfile.ZipFile(path) as archive:
        [info] = [info for info in archive.infolist() if info.filename.endswith("/data/0")]
    with path.open("r+b") as file:
        file.seek(info.header_offset)
        header = file.read(30)
        name_length, extra_length = struct.unpack("<HH", header[26:30])
        file.seek(info.header_offset + 30 + name_length + extra_length)
        data = file.read(4)
        file.seek(-4, os.SEEK_CUR)
        file.write(bytes(byte ^ 0xFF for byte in data))


def test_a_file_changed_with_its_size_intact_is_found_before_a_resume_and_passed_over(tmp_path: Path) -> None:
    checkpointer, _writer, model, optimizer = new_run(tmp_path)
    checkpointer.track({"model": model, "optimizer": optimizer}, rank=0)
    for step in (1, 2):
        train(model, optimizer, range(step, step + 1))
        checkpointer.save(step, [])
        checkpointer.wait()
        if step == 1:
            at_step_1 = {key: tensor.clone() for key, tensor in model.state_dict().items()}
    newest = newest_verified(str(tmp_path))
    assert newest is not None and newest.record is not None and newest.step == 2
    assert set(newest.record.checksums[LOOP_STATE]) >= {"data.pkl", "data/0"}  # each stored tensor's checksum is kept
    size = (tmp_path / "checkpoint-2" / LOOP_STATE).stat().st_size
    flip_bytes_in_a_record(tmp_path / "checkpoint-2" / LOOP_STATE)
    assert (tmp_path / "checkpoint-2" / LOOP_STATE).stat().st_size == size
    assert all(found.verified for found in list_checkpoints(str(tmp_path)))  # sizes alone cannot tell

    resumed, writer, again, again_optimizer = new_run(tmp_path, resume_from=newest.path)
    assert resumed.track({"model": again, "optimizer": again_optimizer}, rank=0) == 2  # from checkpoint-1
    assert all(torch.equal(again.state_dict()[key], at_step_1[key]) for key in at_step_1)
    [said] = [event.text for event in writer.sent if isinstance(event, Notice)]
    assert "; passed over checkpoint-2: state.pt changed since it was saved (" in said


def train_a_tiny_mixtral(output_dir: str) -> int:
    from support.tiny_models import tiny_mixtral
    from transformers import Trainer, TrainingArguments

    ids = torch.randint(0, 64, (4, 8), generator=torch.Generator().manual_seed(0))
    data = [{"input_ids": ids[row], "labels": ids[row]} for row in range(4)]
    args = TrainingArguments(output_dir, per_device_train_batch_size=2, max_steps=2, report_to=[], save_strategy="no")
    trainer = Trainer(model=tiny_mixtral(experts_per_token=2), args=args, train_dataset=data)
    trainer.train()
    return int(trainer.state.global_step)


def test_a_trainers_mixtral_checkpoint_is_verified_though_save_pretrained_converts_its_experts(tmp_path: Path) -> None:
    import tpu_nb

    checkpoints = tmp_path / "checkpoints"
    steps = tpu_nb.launch(train_a_tiny_mixtral, str(tmp_path / "out"), progress=False, checkpoint=str(checkpoints), every="2steps")
    assert steps == 2
    [saved] = list_checkpoints(str(checkpoints))
    assert (saved.step, saved.state) == (2, "verified")  # so older ones are pruned: checkpoints no longer pile up


def test_a_loop_checkpoint_written_before_checksums_were_kept_still_resumes(tmp_path: Path) -> None:
    import numpy

    checkpointer, _writer, model, optimizer = new_run(tmp_path)
    checkpointer.track({"model": model, "optimizer": optimizer}, rank=0)
    train(model, optimizer, range(1))
    checkpointer.save(1, [])
    checkpointer.wait()
    path = tmp_path / "checkpoint-1"
    state = torch.load(path / LOOP_STATE, weights_only=True)
    numpy.random.seed(7)
    state["rng"]["numpy"] = numpy.random.get_state()  # as tpu_nb wrote it then: a tuple holding an array
    expected = numpy.random.rand()
    torch.save(state, path / LOOP_STATE)
    record = json.loads((path / RECORD).read_text())
    del record["checksums"]
    record["files"][LOOP_STATE] = (path / LOOP_STATE).stat().st_size
    (path / RECORD).write_text(json.dumps(record))
    resumed, _writer, again, again_optimizer = new_run(tmp_path, resume_from=str(path))
    numpy.random.seed(0)
    assert resumed.track({"model": again, "optimizer": again_optimizer}, rank=0) == 2
    assert numpy.random.rand() == expected  # its NumPy state came back


def test_old_checkpoints_that_cannot_be_removed_leave_the_new_one_verified_and_said(monkeypatch: pytest.MonkeyPatch) -> None:
    import fsspec

    checkpointer, writer, model, optimizer = new_run(Path("unused"), keep=1)
    checkpointer.plan = CheckpointPlan("memory://locked/run", Every(steps=1), keep=1)
    checkpointer.track({"model": model}, rank=0)

    def refused(*args: object, **kwargs: object) -> None:
        raise PermissionError(403, "the bucket refused the deletion")

    monkeypatch.setattr(type(fsspec.filesystem("memory")), "rm", refused)  # fsspec keeps a file system per thread
    for step in (1, 2):
        train(model, optimizer, range(step, step + 1))
        checkpointer.save(step, [])
        checkpointer.wait()
    saved = [(event.step, event.verified, event.removed) for event in writer.sent if isinstance(event, CheckpointSaved)]
    assert saved == [(1, True, 0), (2, True, 0)]
    [said] = [event.text for event in writer.sent if isinstance(event, Notice)]
    assert (
        said
        == "older checkpoints in memory://locked/run could not be removed (PermissionError: [Errno 403] the bucket refused the deletion)"
    )


def test_a_trainers_checkpoint_changed_since_it_was_saved_is_passed_over_for_the_one_before(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    checkpointer, _writer, model, optimizer = new_run(tmp_path)
    checkpointer.remember_start(model)
    for step in (2, 4):  # what a Trainer leaves, then tpu_nb checks
        train(model, optimizer, range(step, step + 1))
        path = tmp_path / f"checkpoint-{step}"
        path.mkdir()
        save_file(dict(model.state_dict()), str(path / "model.safetensors"))
        torch.save(optimizer.state_dict(), path / "optimizer.pt")
        checkpointer.verify_trainer_checkpoint(path, model, step, [])
        checkpointer.wait()
    weights = bytearray((tmp_path / "checkpoint-4" / "model.safetensors").read_bytes())
    position = weights.find(model.weight.detach().numpy().tobytes())
    weights[position] ^= 0xFF
    (tmp_path / "checkpoint-4" / "model.safetensors").write_bytes(bytes(weights))  # the same size

    newest = newest_verified(str(tmp_path))
    assert newest is not None and newest.step == 4
    resumed, writer, again, _optimizer = new_run(tmp_path, resume_from=newest.path)
    path, local = resumed.resume_copy()  # what a Trainer's train() asks under --resume
    resumed.resume_trainer(str(local), again, rank=0)
    assert (path, local) == (str(tmp_path / "checkpoint-2"), tmp_path / "checkpoint-2")
    [said] = [event.text for event in writer.sent if isinstance(event, Notice)]
    assert said == (
        f"resumed from {tmp_path}/checkpoint-2 (step 2); passed over checkpoint-4: model.safetensors changed since it was "
        "saved (1 of its tensors differ from the checksums in its record: weight)"
    )


def train_a_loop_on_xla() -> None:
    import torch_xla

    import tpu_nb

    device = torch_xla.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Dropout(0.1), torch.nn.Linear(32, 8)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    tpu_nb.checkpoint.track(model=model, optimizer=optimizer)
    for step in range(21):
        loss = model(torch.randn(16, 8).to(device)).pow(2).mean()
        loss.backward()
        optimizer.step()  # while the save thread works on the checkpoint of the step before
        optimizer.zero_grad()
        torch_xla.sync()
        tpu_nb.report(step=step, loss=loss)


def test_a_loop_on_xla_goes_on_training_while_its_checkpoints_are_written(tmp_path: Path) -> None:
    import tpu_nb

    tpu_nb.launch(train_a_loop_on_xla, progress=False, checkpoint=str(tmp_path), every="10steps", keep=5)
    assert [(found.step, found.state) for found in list_checkpoints(str(tmp_path))] == [(0, "verified"), (10, "verified"), (20, "verified")]
