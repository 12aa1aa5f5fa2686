"""TRL's metric patterns on deferred values give TRL's numbers without reading the device until the log, and a
trainer's log reads them all in one transfer (CPU tensors stand for the device's here; the XLA run is in
tests/real_kernel/test_trl_kernel.py)."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tpu_nb.workers.trainer.deferred_metrics import DeferredValue, defer_metric_reads, read_deferred


def sft_metrics(gathered: Any, label_mask: Any, entropy: Any, is_top1: Any) -> tuple[Any, Any]:
    """What SFTTrainer.compute_loss does with its gathers (trl 1.16, sft_trainer.py), verbatim but for the gather."""
    num_valid = gathered(label_mask.sum()).sum()
    entropy_sum = gathered(entropy.detach().sum()).sum()
    num_correct = gathered(is_top1.sum()).sum()
    entropy_mean = (entropy_sum / num_valid).item() if num_valid > 0 else 0.0
    accuracy = (num_correct / num_valid).item() if num_valid > 0 else 0.0
    return entropy_mean, accuracy


@pytest.mark.parametrize("valid", [[1, 1, 0, 1], [0, 0, 0, 0]])
def test_the_sft_pattern_gives_trls_numbers_and_zero_where_nothing_counts(valid: list[int]) -> None:
    label_mask = torch.tensor(valid)
    entropy = torch.tensor([0.5, 1.5, 0.0, 2.0]) * label_mask
    is_top1 = torch.tensor([1, 0, 0, 1]) * label_mask
    expected = sft_metrics(lambda value: value, label_mask, entropy, is_top1)
    deferred = sft_metrics(DeferredValue, label_mask, entropy, is_top1)
    assert all(isinstance(value, DeferredValue) for value in deferred)
    assert [float(value) for value in deferred] == pytest.approx(expected)


def test_dpo_patterns_token_counts_and_a_running_total() -> None:
    chosen, total = DeferredValue(torch.tensor(6.0)), DeferredValue(torch.tensor(4))
    assert float(chosen.sum().item() / total.sum().item() if total > 0 else 0.0) == 1.5
    assert float(DeferredValue(torch.tensor([1.0, 3.0])).mean().item()) == 2.0
    running = 0
    running += DeferredValue(torch.tensor(10)).sum().item() // 1
    running += DeferredValue(torch.tensor(7)).sum().item() // 1
    assert int(running) == 17
    assert DeferredValue(torch.tensor([1.0, 2.0])).tolist() == [1.0, 2.0]  # beyond the patterns: read at once
    assert DeferredValue(torch.tensor(0)) == 0 and not DeferredValue(torch.tensor(0)) and DeferredValue(torch.tensor(3)) >= 3


def test_a_trainers_log_reads_every_deferred_value_once_and_averages_as_trl_does() -> None:
    logged: list[dict[str, Any]] = []
    trainer = SimpleNamespace(
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _total_train_tokens=0,
        accelerator=SimpleNamespace(gather_for_metrics=lambda value: value, gather=lambda value: value),
    )

    def compute_loss(batch: Any) -> Any:
        entropy = trainer.accelerator.gather_for_metrics(batch.float().sum()).sum()
        trainer._metrics["train"]["entropy"].append((entropy / 2).item())
        trainer._total_train_tokens += trainer.accelerator.gather_for_metrics(batch.sum()).sum().item() // 1
        trainer._metrics["train"]["num_tokens"] = [trainer._total_train_tokens]
        return batch.float().mean()

    def log(logs: dict[str, Any]) -> None:  # TRL's: average what was kept since the last log
        logged.append({**logs, **{key: sum(values) / len(values) for key, values in trainer._metrics["train"].items()}})
        trainer._metrics["train"].clear()

    trainer.compute_loss, trainer.log = compute_loss, log
    defer_metric_reads(trainer)
    for batch in (torch.tensor([2, 4]), torch.tensor([6, 8])):
        trainer.compute_loss(batch)
    assert isinstance(trainer._metrics["train"]["entropy"][0], DeferredValue)
    assert trainer.accelerator.gather_for_metrics(torch.tensor(1)).__class__ is torch.Tensor  # only inside compute_loss
    trainer.log({"loss": 1.0})
    assert logged == [{"loss": 1.0, "entropy": 5.0, "num_tokens": 20.0}]
    assert trainer._total_train_tokens == 20 and isinstance(trainer._total_train_tokens, int)
    read_deferred(trainer)  # nothing left to read
