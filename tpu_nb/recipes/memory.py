"""How much TPU memory a fine-tuning needs per core, whole replicas against FSDP: an estimate.

Pure arithmetic on the model's size (parameters, layers, hidden size, heads)
and the run's shape. Weights, gradients and AdamW's two moments (kept in
f32) for what is trained, plus the activations kept for the backward pass
(per layer and token: about 34 x hidden + 5 x heads x length values, the
usual estimate for a transformer layer, in 16 bits; doubled in f32). Under
FSDP the weights, gradients and optimizer states are split over the cores,
while each core still holds its own activations and, for a moment, one
layer's gathered weights.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpu_nb.basics.units import format_bytes
from tpu_nb.recipes.config import TrainConfig

GIB = 2**30

# HBM per XLA device by TPU generation (v2/v3: per TensorCore, two per chip).
HBM_BYTES_PER_DEVICE = {
    "v2": 8 * GIB,
    "v2/v3": 8 * GIB,  # v2 and v3 share a PCI id; the smaller to be safe
    "v3": 16 * GIB,
    "v4": 32 * GIB,
    "v5e": 16 * GIB,
    "v5p": 95 * GIB,
    "v6e": 32 * GIB,
    "v7x": 192 * GIB,
}


@dataclass(frozen=True, slots=True)
class ModelSize:
    parameters: int
    layers: int
    hidden: int
    heads: int


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """Bytes per XLA device for one training step, both ways."""

    replica: int
    """A whole replica on every core (data parallel)."""
    fsdp: int
    """Split over `devices` cores (FSDP)."""
    devices: int
    device_memory: int | None
    """What one device has (None off-TPU)."""
    generation: str | None

    @property
    def replica_fits(self) -> bool | None:
        return None if self.device_memory is None else self.replica <= _USABLE * self.device_memory

    @property
    def fsdp_fits(self) -> bool | None:
        return None if self.device_memory is None else self.fsdp <= _USABLE * self.device_memory

    def advice(self, lora_possible: bool) -> str:
        """One paragraph for the picker: the figures, and what to choose."""
        figures = f"Memory per core (estimate): {format_bytes(self.replica)} with a whole replica per core, {format_bytes(self.fsdp)} with FSDP over {self.devices} cores"
        if self.device_memory is None:
            return figures + " (no TPU here to compare with)."
        has = f"; a TPU {self.generation} core has {format_bytes(self.device_memory)}"
        if self.replica_fits:
            return figures + has + ": a replica fits, data-parallel is the simpler choice."
        other = " or LoRA (lora_rank, e.g. 8)" if lora_possible else ""
        if self.fsdp_fits:
            return figures + has + f": a replica does not fit. Choose strategy fsdp{other}."
        return (
            figures
            + has
            + f": neither fits. Use LoRA{' (lora_rank)' if lora_possible else ''}, bf16, a smaller batch or shorter examples, or more cores."
        )


_USABLE = 0.9  # XLA and the runtime keep some of the memory for themselves


def estimate_memory(
    size: ModelSize, trainable: int, batch_per_device: int, length: int, devices: int, bf16: bool, generation: str | None
) -> MemoryEstimate:
    """The estimate for training `trainable` of `size.parameters` parameters with this batch shape."""
    value_bytes = 2 if bf16 else 4
    weights = size.parameters * value_bytes
    gradients = trainable * value_bytes
    optimizer = trainable * 8  # AdamW: two f32 moments per trained parameter
    activations = size.layers * batch_per_device * length * (34 * size.hidden + 5 * size.heads * length) * value_bytes // 2
    one_layer = weights // max(size.layers, 1)
    devices = max(devices, 1)
    return MemoryEstimate(
        replica=weights + gradients + optimizer + activations,
        fsdp=(weights + gradients + optimizer) // devices + activations + one_layer,
        devices=devices,
        device_memory=HBM_BYTES_PER_DEVICE.get(generation) if generation else None,
        generation=generation,
    )


def estimate_for(config: TrainConfig, size: ModelSize, devices: int, generation: str | None) -> MemoryEstimate:
    """The estimate for `config` on this runtime (with LoRA: only the adapters are trained)."""
    return estimate_memory(
        size, trainable_parameters(size, config.lora_rank), config.per_core_batch_size, config.max_length, devices, config.bf16, generation
    )


def trainable_parameters(size: ModelSize, lora_rank: int | None) -> int:
    """Every parameter, or with LoRA about two rank x hidden matrices on two projections per layer."""
    return size.parameters if lora_rank is None else size.layers * 2 * 2 * lora_rank * size.hidden
