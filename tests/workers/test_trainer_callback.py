"""The Trainer's progress reaches the notebook whatever it logs: 200 per-class metrics in one log call included."""

from __future__ import annotations

from pathlib import Path

import tpu_nb


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
