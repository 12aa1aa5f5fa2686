"""A Trainer's batch counted as transformers counts non-padding tokens, and its model's FLOPs per token, without training."""

from __future__ import annotations

import torch

from tpu_nb.workers.trainer.batch_counts import ATTENTION_FLOPS, ModelFlops, batch_counts, sequence_length

IDS = torch.tensor([[5, 6, 7, 0, 0], [8, 9, 0, 0, 0]])


def test_tokens_are_the_masks_sum_else_those_not_padding_else_all() -> None:
    tokens, samples = batch_counts({"input_ids": IDS, "attention_mask": (IDS != 0).long()}, "input_ids", None)
    assert (int(tokens), samples) == (5, 2)
    tokens, samples = batch_counts({"input_ids": IDS, "labels": torch.tensor([0, 1])}, "input_ids", 0)
    assert (int(tokens), samples) == (5, 2)
    assert batch_counts({"input_ids": IDS}, "input_ids", None) == (10, 2)


def test_a_batch_without_its_main_input_counts_its_samples_only() -> None:
    assert batch_counts({"pixel_values": torch.zeros(4, 3, 8, 8)}, "input_ids", None) == (None, 4)
    assert batch_counts([IDS], "input_ids", None) == (None, None)
    assert sequence_length({"input_ids": IDS}, "input_ids") == 5 and sequence_length({}, "input_ids") is None


def test_flops_per_token_are_the_trainers_estimate_of_one_token_plus_attention_at_the_length() -> None:
    from transformers import BertConfig, LlamaConfig

    def estimate(inputs: dict[str, torch.Tensor]) -> int:  # as Trainer.floating_point_ops: 6 x tokens x parameters
        return 6 * inputs["input_ids"].numel() * 1000

    bert = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2)  # heads of hidden_size / heads
    assert ModelFlops(estimate, bert, "input_ids").per_token(16) == 6000 + ATTENTION_FLOPS * 2 * 32 * 16
    llama = LlamaConfig(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, head_dim=8)  # heads of their own size
    flops = ModelFlops(estimate, llama, "input_ids")
    assert (flops.per_token(128), flops.per_token(16)) == (
        6000 + ATTENTION_FLOPS * 3 * 4 * 8 * 128,
        6000 + ATTENTION_FLOPS * 3 * 4 * 8 * 16,
    )
    assert ModelFlops(estimate, None, "input_ids").per_token(16) == 6000  # no config: the estimate alone


def test_a_model_the_trainer_cannot_count_has_no_flops_per_token() -> None:
    assert ModelFlops(lambda inputs: 0, None, "input_ids").per_token(16) is None
