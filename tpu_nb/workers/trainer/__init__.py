"""Hugging Face's `Trainer` in a worker: the hook that adapts every Trainer, and the callback that reports its progress."""
