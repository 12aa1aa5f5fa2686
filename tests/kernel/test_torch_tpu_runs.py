"""Launches on TorchTPU, a process per chip, with a CPU device and gloo standing in for `tpu:0` and "tpu_dist".

The whole path around the device: each rank's environment, the process
group, DDP's averaged gradients, progress, a graceful stop at one step,
an error pointing into the code, `--return` weights, a rerun, the mode's
default and nothing left running (see tests/support/torch_tpu_stand_in.py).
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from support.kernel import plain
from support.platforms import MakeSystem
from support.processes import STARTUP, descendants, wait_until
from support.torch_tpu_stand_in import install

import tpu_nb
from tpu_nb.kernel.endings.notebook_errors import LaunchRefused, WorkerError
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.run import local_run
from tpu_nb.kernel.run.followed_run import run_in_foreground
from tpu_nb.kernel.run.local_run import Run
from tpu_nb.wire.checkpoints import list_checkpoints
from tpu_nb.wire.events import Event, Heartbeat, Progress, Stopping, WorkerStarted
from tpu_nb.workers.processes.programs import FunctionProgram


@pytest.fixture
def torch_tpu(monkeypatch: pytest.MonkeyPatch, make_system: MakeSystem) -> None:
    install(monkeypatch, make_system)


def what_each_rank_sees() -> dict[str, Any]:
    import torch.distributed as dist

    names = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "TORCH_TPU_TOPOLOGY", "TPU_NB_STAND_IN_MODE")
    return {
        "env": {name: os.environ.get(name) for name in names},
        "group": (dist.get_rank(), dist.get_world_size(), dist.get_backend()),
        "pid": os.getpid(),
    }


def test_every_chip_gets_a_process_of_its_own_with_its_rank_environment_and_process_group(torch_tpu: None) -> None:
    seen = tpu_nb.launch(what_each_rank_sees, all_results=True, progress=False, timeout=120)
    assert [rank["group"] for rank in seen] == [(rank, 4, "gloo") for rank in range(4)]
    assert len({rank["pid"] for rank in seen} | {os.getpid()}) == 5  # four processes, none the notebook's
    for rank, found in enumerate(seen):
        assert found["env"] == {
            "WORLD_SIZE": "4",
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "TORCH_TPU_TOPOLOGY": "2,2,1",  # a v4 host's 4 chips
            "TPU_NB_STAND_IN_MODE": "fused",  # a loop's default mode
        }
    assert "TPU_NB_STAND_IN_MODE" not in os.environ and "RANK" not in os.environ  # the notebook's environment is its own
    assert tpu_nb.launch(what_each_rank_sees, progress=False, mode="eager", timeout=120)["env"]["TPU_NB_STAND_IN_MODE"] == "eager"
    assert wait_until(lambda: not descendants(os.getpid()), 10), descendants(os.getpid())


def train_with_ddp(steps: int, pause: float = 0.0) -> list[str]:
    """DDP over the process group; after every step every rank's weights hash the same."""
    import hashlib
    import time

    import torch
    import torch.distributed as dist

    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1).to(device_of_rank()))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.randn(4, 8, generator=torch.Generator().manual_seed(rank))  # a different batch on every rank
    agreed = []
    for step in range(steps):
        loss = model(data).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        digest = hashlib.sha256(model.module.weight.detach().numpy().tobytes()).hexdigest()
        digests: list[str] = [""] * dist.get_world_size()
        dist.all_gather_object(digests, digest)
        agreed.append(f"{step}:{len(set(digests))}")
        time.sleep(pause)
        tpu_nb.report(step=step, loss=loss)
    return agreed


def device_of_rank() -> Any:
    import torch

    return torch.device("cpu")


class Events:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list[Any]:
        return [event for event in self.events if isinstance(event, kind)]


def test_ddp_averages_gradients_across_the_chips_processes_and_progress_comes_from_rank_0(torch_tpu: None) -> None:
    events = Events()
    ending = run_in_foreground(Run(FunctionProgram(train_with_ddp, (5,)), LaunchOptions(progress=False), "ddp", [events]))
    assert ending.status == "done", ending.text
    assert ending.results[0].value == [f"{step}:1" for step in range(5)]  # one weight hash across the processes, every step
    started = events.of(WorkerStarted)
    assert sorted(event.rank for event in started) == [0, 1, 2, 3] and len({event.pid for event in started}) == 4
    assert all(event.device == f"cpu (chip {event.rank}, fused)" for event in started)
    assert {event.rank for event in events.of(Progress)} == {0} and max(event.step for event in events.of(Progress)) == 4
    assert wait_until(lambda: not descendants(os.getpid()), 10), descendants(os.getpid())


def test_a_graceful_stop_stops_every_chips_process_at_one_step(torch_tpu: None) -> None:
    events = Events()
    run = Run(FunctionProgram(train_with_ddp, (100_000, 0.02)), LaunchOptions(progress=False, stop_grace=60), "stop", [events])

    def stop_once_every_rank_beats() -> None:
        if wait_until(lambda: {event.rank for event in events.of(Heartbeat) if (event.step or 0) >= 3} == {0, 1, 2, 3}, STARTUP):
            run.request_stop()

    threading.Thread(target=stop_once_every_rank_beats).start()
    ending = run_in_foreground(run)
    assert ending.status == "stopped", ending.text
    stops = {event.rank: event.step for event in events.of(Stopping)}
    assert set(stops) == {0, 1, 2, 3} and len(set(stops.values())) == 1, stops
    assert wait_until(lambda: not descendants(os.getpid()), 10), descendants(os.getpid())


def fail_on_rank_2() -> None:
    import time

    import torch.distributed as dist

    if dist.get_rank() == 2:
        raise ValueError("rank 2 has a bad shard")
    time.sleep(600)  # the others would wait for it forever


def test_an_error_on_one_chip_ends_every_process_with_its_traceback(torch_tpu: None) -> None:
    with pytest.raises(WorkerError) as raised:
        tpu_nb.launch(fail_on_rank_2, progress=False, timeout=120)
    assert raised.value.rank == 2 and "ValueError: rank 2 has a bad shard" in str(raised.value)
    # IPython colours the source line once a shell with colours exists in the process (as in the full suite).
    assert 'raise ValueError("rank 2 has a bad shard")' in plain("\n".join(raised.value._render_traceback_()))
    assert wait_until(lambda: not descendants(os.getpid()), 10), descendants(os.getpid())


def test_a_cell_returns_rank_0s_weights_and_runs_again_without_a_restart(torch_tpu: None, ip: InteractiveShell) -> None:
    cell = """%%tpu_train --no-progress --return model
import torch.distributed as dist
model = torch.nn.Linear(2, 1).to(device)
with torch.no_grad():
    model.weight.fill_(float(dist.get_rank() + 1))
(str(device), rank, world_size)
"""
    with capture_output():
        ip.run_cell("import torch\nmodel = torch.nn.Linear(2, 1)")
        first = ip.run_cell(cell)
        second = ip.run_cell(cell)
    for result in (first, second):
        assert result.success, result.error_in_exec
        assert result.result == ("cpu", 0, 4)
    assert float(ip.user_ns["model"].weight[0, 0].detach()) == 1.0  # rank 0's, loaded into the notebook's module


def uses_a_trainer() -> None:
    from transformers import Trainer

    Trainer(model=None)


def test_options_torch_tpu_does_not_take_are_refused_with_the_fix(torch_tpu: None) -> None:
    with pytest.raises(LaunchRefused, match=r"--spmd on TorchTPU .* is not in tpu_nb yet"):
        tpu_nb.launch(what_each_rank_sees, spmd=True, progress=False)
    with pytest.raises(LaunchRefused, match=r"--cores 3: TorchTPU runs 1, 2, 4, 8 processes on a TPU v4 host"):
        tpu_nb.launch(what_each_rank_sees, cores=3, progress=False)
    with pytest.raises(LaunchRefused, match=r"--cores 4: a Hugging Face Trainer on TorchTPU trains on one chip"):
        tpu_nb.launch(uses_a_trainer, cores=4, progress=False)
    with pytest.raises(LaunchRefused, match=r"mode='lazy': TorchTPU's modes are eager, fused, compile"):
        tpu_nb.launch(what_each_rank_sees, mode="lazy", progress=False)


TRAINER_SETUP = """
import tempfile, torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
torch.manual_seed(0)
config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=32, num_labels=2)
model = BertForSequenceClassification(config)
ids = torch.randint(0, 100, (256, 16), generator=torch.Generator().manual_seed(0))
labels = (ids[:, 0] > 50).long()
train_data = [{"input_ids": ids[i], "labels": labels[i]} for i in range(256)]
output_dir = tempfile.mkdtemp()
"""

TRAINER_CELL = """%%tpu_train --no-progress --return model
args = TrainingArguments(output_dir, per_device_train_batch_size=8, max_steps=6, logging_steps=2, report_to=[], save_strategy="no")
trainer = Trainer(model=model, args=args, train_dataset=train_data)
import torch.distributed as dist, os
(trainer.train().global_step, trainer.args.world_size, trainer.args.parallel_mode.value, os.environ["TPU_NB_STAND_IN_MODE"])
"""


def test_an_unchanged_trainer_trains_on_one_chip_in_its_default_mode_and_says_why(torch_tpu: None, ip: InteractiveShell) -> None:
    with capture_output() as captured:
        ip.run_cell(TRAINER_SETUP)
        before = ip.user_ns["model"].classifier.weight.detach().clone()
        result = ip.run_cell(TRAINER_CELL)
    assert result.success, result.error_in_exec
    assert "a Hugging Face Trainer on TorchTPU trains on one chip: accelerate" in captured.stderr
    assert result.result == (6, 1, "not_parallel", "eager")  # one chip (accelerate has no TorchTPU DDP); a Trainer's default mode
    assert not ip.user_ns["model"].classifier.weight.detach().equal(before)  # rank 0's trained weights, in place
    assert wait_until(lambda: not descendants(os.getpid()), 10), descendants(os.getpid())


def test_an_operator_torch_tpu_lacks_is_explained_with_the_fix(torch_tpu: None) -> None:
    def missing_op() -> None:
        raise RuntimeError("operator 'aten::_upsample_bilinear2d_aa.out' is not implemented for TPU. Please file a feature request")

    with pytest.raises(WorkerError) as raised:
        tpu_nb.launch(missing_op, progress=False, timeout=120)
    assert "aten::_upsample_bilinear2d_aa.out has no TPU kernel. Fix: move" in "\n".join(raised.value._render_traceback_())


def train_with_checkpoints(steps: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    start = tpu_nb.checkpoint.track(model=model.module, optimizer=optimizer)
    data = torch.randn(4, 8, generator=torch.Generator().manual_seed(dist.get_rank()))
    for step in range(start, steps):
        loss = model(data).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        tpu_nb.report(step=step, loss=loss, max_steps=steps)
    return {"start": start, "weight": model.module.weight.detach().clone()}


def test_checkpoints_are_saved_verified_and_resumed_from(torch_tpu: None, tmp_path: Path) -> None:
    directory = str(tmp_path / "checkpoints")
    whole = tpu_nb.launch(train_with_checkpoints, 12, progress=False, timeout=120)
    first = tpu_nb.launch(train_with_checkpoints, 6, progress=False, checkpoint=directory, every="3steps", timeout=120)
    assert first["start"] == 0
    assert [(saved.step, saved.state) for saved in list_checkpoints(directory)] == [(3, "verified"), (5, "verified")]  # and at the end
    resumed = tpu_nb.launch(train_with_checkpoints, 12, progress=False, checkpoint=directory, resume=True, timeout=120)
    assert resumed["start"] == 6
    assert torch.equal(resumed["weight"], whole["weight"])  # as if never stopped


def wait_in_a_barrier_for_a_rank_that_never_comes() -> None:
    import time

    import torch.distributed as dist

    if dist.get_rank() == 3:
        time.sleep(600)
    dist.barrier()


def test_kill_ends_ranks_waiting_in_a_collective(torch_tpu: None) -> None:
    events = Events()
    run = Run(FunctionProgram(wait_in_a_barrier_for_a_rank_that_never_comes, ()), LaunchOptions(progress=False), "kill", [events])

    def kill_once_every_rank_started() -> None:
        if wait_until(lambda: len(events.of(WorkerStarted)) == 4, STARTUP):
            time.sleep(1)
            run.request_kill()

    threading.Thread(target=kill_once_every_rank_started).start()
    ending = run_in_foreground(run)
    assert ending.status == "interrupted", ending.text
    assert wait_until(lambda: not descendants(os.getpid()), 10), descendants(os.getpid())


def names_its_trainer() -> str:
    from transformers import Trainer

    return Trainer.__name__


def test_the_dashboard_says_the_mode_and_why(torch_tpu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    labels: list[str] = []
    make_display = local_run.make_display

    def recording(title: str, label: str, workers: int, **options: Any) -> Any:
        labels.append(label)
        return make_display(title, label, workers, **options)

    monkeypatch.setattr(local_run, "make_display", recording)
    with capture_output():
        tpu_nb.launch(print, "a loop", timeout=120)
        assert tpu_nb.launch(names_its_trainer, timeout=120) == "Trainer"
        tpu_nb.launch(print, "compiled", mode="compile", timeout=120)
    assert labels == [
        "Cloud TPU VM · TPU v4 × 4 · TorchTPU · fused (a loop's default)",
        "Cloud TPU VM · TPU v4 × 4 · TorchTPU · eager (a Trainer's default)",
        "Cloud TPU VM · TPU v4 × 4 · TorchTPU · compile (--mode)",
    ]


def test_a_rank_whose_stack_cannot_start_says_why_like_an_error_in_the_cell(torch_tpu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from support import torch_tpu_stand_in

    from tpu_nb.workers.processes import chip_ranks

    def load_a_missing_library() -> None:
        importlib.import_module("torch_tpu_that_is_not_there")

    monkeypatch.setattr(chip_ranks, "TORCH_TPU", replace(torch_tpu_stand_in.STAND_IN, load=load_a_missing_library))
    with pytest.raises(WorkerError) as raised:
        tpu_nb.launch(print, "never runs", progress=False, timeout=120)
    assert "ModuleNotFoundError: No module named 'torch_tpu_that_is_not_there'" in str(raised.value)
    assert wait_until(lambda: not descendants(os.getpid()), 10), descendants(os.getpid())


def chips_of_the_world(trial: dict[str, Any]) -> dict[str, Any]:
    import torch.distributed as dist

    placed = [None] * dist.get_world_size()
    dist.all_gather_object(placed, (os.environ["RANK"], os.environ["TPU_VISIBLE_CHIPS"], os.environ["TORCH_TPU_TOPOLOGY"]))
    return {"n": trial["n"], "world": dist.get_world_size(), "placed": placed}


def test_a_sweep_on_torch_tpu_gives_each_trial_a_world_of_its_chips_with_a_rank_on_each(
    torch_tpu: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = tpu_nb.launch(chips_of_the_world, trials="n=0,1,2", cores_per_trial=2, progress=False, timeout=300)
    assert [outcome.status for outcome in result.trials] == ["done"] * 3
    for value, outcome in zip(result.values, result.trials, strict=True):
        assert value["world"] == 2  # a process group of the trial's two chips alone
        chips = {"chips 0-1": ["0", "1"], "chips 2-3": ["2", "3"]}[outcome.where]
        assert value["placed"] == [("0", chips[0], "1,2,1"), ("1", chips[1], "1,2,1")]  # rank N on its world's Nth chip
    assert {outcome.where for outcome in result.trials} == {"chips 0-1", "chips 2-3"}
    assert not descendants(os.getpid())
