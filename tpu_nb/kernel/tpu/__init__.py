"""The TPU seen from the kernel, without touching it: what its chips are doing, who holds it (`%tpu_release`), TorchTPU kept out."""
