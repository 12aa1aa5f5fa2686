"""Start workers on every XLA device through `xmp.spawn` (fork) and bring results back."""

from tpu_nb.launcher.api import launch
from tpu_nb.launcher.background import TrainingRun
from tpu_nb.launcher.control import StopTraining
from tpu_nb.launcher.errors import LaunchRefused, TrainingInterrupted, TrainingTimedOut, WorkerDied, WorkerError
from tpu_nb.launcher.options import LaunchOptions

__all__ = [
    "launch",
    "LaunchOptions",
    "LaunchRefused",
    "StopTraining",
    "TrainingInterrupted",
    "TrainingRun",
    "TrainingTimedOut",
    "WorkerDied",
    "WorkerError",
]
