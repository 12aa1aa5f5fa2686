"""Each TPU generation's peak bf16 compute per chip, as Google Cloud publishes it: what MFU is measured against.

Keyed by the generation names `detect` gives (`TPU_GENERATION_BY_PCI_DEVICE`,
v2 and v3 told apart by the accelerator type) and pod slices use. "v2/v3"
(a v2 or v3 host whose accelerator type is unknown) has no peak: the two
differ by almost three times.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

TERA = 1e12

PEAK_BF16_FLOPS_PER_CHIP: Mapping[str, float] = MappingProxyType(
    {
        # 180 teraflops per Cloud TPU v2 device of 4 chips (Google's announcement of Cloud TPUs, 2017); Cloud TPU's v2
        # page (https://cloud.google.com/tpu/docs/v2) refers to "A Domain Specific Supercomputer for Training Deep
        # Neural Networks" (Jouppi et al., CACM 2020) for its figures.
        "v2": 45 * TERA,
        # "Peak compute per chip: 123 teraflops (bf16)": https://cloud.google.com/tpu/docs/v3
        "v3": 123 * TERA,
        # "Peak compute per chip: 275 teraflops (bf16 or int8)": https://cloud.google.com/tpu/docs/v4
        "v4": 275 * TERA,
        # "Peak compute per chip (bf16): 197 TFLOPs": https://cloud.google.com/tpu/docs/v5e
        "v5e": 197 * TERA,
        # "Peak compute per chip (BF16) (TFLOPs): 459": https://cloud.google.com/tpu/docs/v5p
        "v5p": 459 * TERA,
        # "Peak compute per chip (bf16): 918 TFLOPs": https://cloud.google.com/tpu/docs/v6e
        "v6e": 918 * TERA,
        # "Peak compute per chip (BF16) (TFLOPs): 2307" (Ironwood, two TensorCores a chip): https://cloud.google.com/tpu/docs/tpu7x
        "v7x": 2307 * TERA,
    }
)


def peak_bf16_flops(generation: str) -> float | None:
    """A chip's peak bf16 FLOP/s for a generation name ("v5e"); None for one without a known peak ("v2/v3")."""
    return PEAK_BF16_FLOPS_PER_CHIP.get(generation)
