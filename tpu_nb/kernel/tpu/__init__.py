"""The TPU seen from the kernel, without touching it: what its chips are doing (`chip_usage`), who holds it
(`release`, `%tpu_release`), TorchTPU's backend kept out of the notebook (`torch_tpu_guard`).
"""
