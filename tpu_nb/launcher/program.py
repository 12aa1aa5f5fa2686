"""What a worker runs: the contract between the launcher and its callers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class WorkerContext:
    """Who this worker is; given to the program in every worker."""

    rank: int
    world_size: int
    device: Any  # torch.device("xla:N")
    devices_in_process: int


class Program(Protocol):
    """Runs in each worker and returns named parts to send back to the kernel."""

    def run(self, context: WorkerContext) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class FunctionProgram:
    """`tpu_nb.launch(fn, *args)`: call `fn(*args)` and send back its return value."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]

    def run(self, context: WorkerContext) -> dict[str, Any]:
        from tpu_nb.launcher.control import StopTraining

        try:
            return {"value": self.fn(*self.args)}
        except StopTraining:
            return {"value": None}  # stopped gracefully inside `report(...)`
