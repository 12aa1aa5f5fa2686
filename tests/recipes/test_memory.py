"""The per-core memory estimate, and the advice it gives."""

from __future__ import annotations

from tpu_nb.recipes.config import TrainConfig
from tpu_nb.recipes.memory import GIB, ModelSize, estimate_for, estimate_memory, trainable_parameters

# Gemma-2B-like: 2.5B parameters, 18 layers, hidden 2048, 8 heads.
GEMMA_2B = ModelSize(parameters=2_500_000_000, layers=18, hidden=2048, heads=8)


def test_fsdp_splits_weights_gradients_and_optimizer_but_not_activations() -> None:
    estimate = estimate_memory(GEMMA_2B, GEMMA_2B.parameters, batch_per_device=8, length=512, devices=8, bf16=True, generation="v5e")
    weights, gradients, optimizer = 2 * GEMMA_2B.parameters, 2 * GEMMA_2B.parameters, 8 * GEMMA_2B.parameters
    activations = 18 * 8 * 512 * (34 * 2048 + 5 * 8 * 512)
    assert estimate.replica == weights + gradients + optimizer + activations
    assert estimate.fsdp == (weights + gradients + optimizer) // 8 + activations + weights // 18
    assert estimate.device_memory == 16 * GIB


def test_a_replica_too_big_for_a_v5e_core_gets_fsdp_or_lora_proposed() -> None:
    estimate = estimate_memory(GEMMA_2B, GEMMA_2B.parameters, 8, 512, 8, True, "v5e")
    assert estimate.replica_fits is False and estimate.fsdp_fits is True
    advice = estimate.advice(lora_possible=True)
    assert advice.startswith(
        f"Memory per core (estimate): {estimate.replica / GIB:.1f} GiB with a whole replica per core, {estimate.fsdp / GIB:.1f} GiB with FSDP over 8 cores"
    )
    assert advice.endswith("a TPU v5e core has 16.0 GiB: a replica does not fit. Choose strategy fsdp or LoRA (lora_rank, e.g. 8).")


def test_a_small_model_fits_and_off_tpu_nothing_is_compared() -> None:
    small = ModelSize(parameters=66_000_000, layers=6, hidden=768, heads=12)
    assert (
        estimate_memory(small, small.parameters, 16, 128, 8, False, "v5e")
        .advice(False)
        .endswith("a replica fits, data-parallel is the simpler choice.")
    )
    off_tpu = estimate_memory(small, small.parameters, 16, 128, 1, False, None)
    assert off_tpu.replica_fits is None and off_tpu.advice(False).endswith("(no TPU here to compare with).")


def test_lora_trains_a_sliver_so_it_needs_far_less() -> None:
    assert trainable_parameters(GEMMA_2B, None) == GEMMA_2B.parameters
    assert trainable_parameters(GEMMA_2B, 8) == 18 * 2 * 2 * 8 * 2048
    config = TrainConfig(model="gemma", task="causal-lm", per_core_batch_size=8, max_length=512, bf16=True)
    full = estimate_for(config, GEMMA_2B, 8, "v5e")
    lora = estimate_for(config.replace(lora_rank=8), GEMMA_2B, 8, "v5e")
    assert lora.replica < full.replica / 2 and lora.replica_fits
