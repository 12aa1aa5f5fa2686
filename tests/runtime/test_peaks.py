"""Every TPU generation %tpu_info can name has its chip's published bf16 peak, but v2/v3, whose two generations differ."""

from __future__ import annotations

from tpu_nb.runtime.detect import TPU_GENERATION_BY_PCI_DEVICE
from tpu_nb.runtime.peaks import PEAK_BF16_FLOPS_PER_CHIP, TERA, peak_bf16_flops


def test_every_generation_detection_names_has_a_peak_but_v2_or_v3() -> None:
    named = {*TPU_GENERATION_BY_PCI_DEVICE.values(), "v2", "v3"}  # the accelerator type tells v2 and v3 apart
    assert {generation for generation in named if peak_bf16_flops(generation) is None} == {"v2/v3"}
    assert set(PEAK_BF16_FLOPS_PER_CHIP) == named - {"v2/v3"}


def test_the_peaks_are_google_clouds_figures() -> None:
    teraflops = {generation: peak / TERA for generation, peak in PEAK_BF16_FLOPS_PER_CHIP.items()}
    assert teraflops == {"v2": 45, "v3": 123, "v4": 275, "v5e": 197, "v5p": 459, "v6e": 918, "v7x": 2307}
