"""The Trainer's progress reaches the notebook whatever it logs (200 per-class metrics in one log call included); its
evaluations and saves are said as the rank's phase."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import tpu_nb
from tpu_nb.wire.stop_reason import StopReason


class RecordingWriter:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, event: Any) -> None:
        self.sent.append(event)


def train_and_log_per_class_scores(output_dir: str) -> int:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, num_labels=2)
    ids = torch.randint(0, 64, (16, 8), generator=torch.Generator().manual_seed(0))
    data = [{"input_ids": ids[i], "labels": int(i % 2)} for i in range(16)]
    args = TrainingArguments(output_dir, per_device_train_batch_size=8, max_steps=2, report_to=[], save_strategy="no")
    trainer = Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=data)
    trainer.train()
    trainer.log({f"eval_class_{n}_f1": n / 200 for n in range(200)})  # what a compute_metrics with per-class scores gives
    return trainer.state.global_step


def test_a_log_of_200_metrics_reaches_the_notebook_as_one_row(tmp_path: Path) -> None:
    run = tpu_nb.launch(train_and_log_per_class_scores, str(tmp_path), background=True, progress=False)
    assert run.wait(300) == 2
    [row] = [row for row in run.metrics if "eval_class_0_f1" in row]
    assert {name for name in row if name.startswith("eval_class_")} == {f"eval_class_{n}_f1" for n in range(200)}
    assert row["step"] == 2 and row["eval_class_199_f1"] == 199 / 200


def test_an_evaluation_or_a_save_after_a_step_is_the_ranks_phase_so_a_stop_waits_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import TrainerControl, TrainerState

    from tpu_nb.wire.shared_memory_stop import StopRequest
    from tpu_nb.workers.cell_api import reporting
    from tpu_nb.workers.trainer.callback import TpuNbCallback

    monkeypatch.setattr(reporting, "HEARTBEAT_INTERVAL", 3600)  # no heartbeat: it would read XLA's metrics in this process
    reporter = reporting.WorkerReporter(RecordingWriter(), StopRequest(1))
    reporter.enter(0, 1)
    reporting.install(reporter)
    callback, state, args = (
        TpuNbCallback(),
        TrainerState(global_step=6, max_steps=100),
        SimpleNamespace(per_device_train_batch_size=8, world_size=1),
    )
    try:
        callback.on_step_end(args, state, TrainerControl(should_evaluate=True, should_save=True))
        assert reporter.phases[0] == "eval"  # the evaluation comes first
        callback.on_evaluate(args, state, TrainerControl(should_save=True))  # (the handler has reset should_evaluate)
        assert reporter.phases[0] == "saving"
        callback.on_save(args, state, TrainerControl())
        assert reporter.phases[0] == "train"
        callback.on_step_end(args, state, TrainerControl())
        assert reporter.phases[0] == "train"
        reporter.stop_request.request(StopReason.USER)
        state.global_step = 7
        control = TrainerControl()
        callback.on_step_end(args, state, control)  # the stop step is one past the furthest rank: 8
        state.global_step = 8
        callback.on_step_end(args, state, control)
        assert control.should_save and reporter.phases[0] == "stopping"  # a stopping rank stays said as stopping
    finally:
        reporting.install(None)
