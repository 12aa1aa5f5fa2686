"""What a caller can ask of a launch, checked before anything starts."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LaunchOptions:
    """Options shared by `%%tpu_train` and `tpu_nb.launch`."""

    cores: int | None = None
    """Use this many XLA devices instead of all of them."""
    timeout: float | None = None
    """Stop every worker after this many seconds (like an interrupt)."""
    all_ranks_output: bool = False
    """Show what every rank prints, prefixed with its rank (default: rank 0 only)."""
    progress: bool = True
    """Show the live progress display."""
    all_results: bool = False
    """Return every rank's result (a list by rank) instead of rank 0's."""
    stop_grace: float = 5.0
    """After a graceful stop request, seconds to wait for the workers to reach a step boundary."""

    def problems(self) -> list[str]:
        """What is wrong with these options, each with the fix."""
        found = []
        if self.cores is not None and self.cores < 1:
            found.append(f"cores={self.cores}: give a positive number of XLA devices, or leave it out to use all.")
        if self.timeout is not None and not self.timeout > 0:
            found.append(f"timeout={self.timeout}: give a positive number of seconds, or leave it out for no limit.")
        if not self.stop_grace > 0:
            found.append(f"stop_grace={self.stop_grace}: give a positive number of seconds.")
        return found
