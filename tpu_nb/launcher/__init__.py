"""Start workers on every XLA device through `xmp.spawn` (fork) and bring results back."""

from tpu_nb.launcher.api import launch
from tpu_nb.launcher.errors import LaunchRefused, TrainingInterrupted, TrainingTimedOut, WorkerDied, WorkerError
from tpu_nb.launcher.options import LaunchOptions

__all__ = ["launch", "LaunchOptions", "LaunchRefused", "TrainingInterrupted", "TrainingTimedOut", "WorkerDied", "WorkerError"]
