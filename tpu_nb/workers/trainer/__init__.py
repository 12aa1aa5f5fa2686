"""Hugging Face's `Trainer` (and TRL's) in a worker: the `hook` that adapts every Trainer, its checkpoints
(`trainer_checkpoints`), the `callback` that reports its progress, a batch's tokens and the model's FLOPs
(`batch_counts`), FSDPv2 under --spmd (`fsdp_v2`), TRL's defaults on XLA (`trl_defaults`) and its per-step reads
kept on the device (`deferred_metrics`).
"""
