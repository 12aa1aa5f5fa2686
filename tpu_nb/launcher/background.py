"""Background runs: the workers train while the notebook stays free.

A helper thread follows the run (events, display, timeout, stops); the
handle only sets flags and reads results, so it is safe from any thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tpu_nb.events import Event, Progress
from tpu_nb.launcher import outcome as outcomes
from tpu_nb.launcher.controller import RunController, final_status


class MetricsLog:
    """Every metric rank 0 reported, as rows of {"step": ..., name: value}."""

    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []

    def on_event(self, event: Event) -> None:
        if isinstance(event, Progress) and event.metrics:
            row: dict[str, Any] = {"step": event.step}
            if event.epoch is not None:
                row["epoch"] = event.epoch
            row.update(event.metrics)
            self.rows.append(row)


class TrainingRun:
    """The handle of a background run: status, wait, stop, kill, metrics, result."""

    def __init__(self, controller: RunController, metrics: MetricsLog, name: str, on_end: Callable[[outcomes.Outcome], Any]) -> None:
        self.name = name
        self.returned: dict[str, Any] = {}
        """The `--return` values once the run ended (also when the notebook kept a rebound name)."""
        self._controller = controller
        self._metrics = metrics
        self._on_end = on_end
        self._outcome: outcomes.Outcome | None = None
        self._value: Any = None
        self._error: BaseException | None = None
        self._finished = threading.Event()
        self._thread = threading.Thread(target=self._follow, name=f"tpu_nb-run-{name}", daemon=True)

    def start(self) -> TrainingRun:
        self._controller.start()
        self._thread.start()
        return self

    def _follow(self) -> None:
        try:
            while self._controller.running:
                self._controller.poll()
            self._outcome = self._controller.finish()
            self._value = self._on_end(self._outcome)
        except BaseException as error:  # noqa: BLE001 - kept for wait()/result, which re-raise it
            self._error = error
        finally:
            self._controller.close()
            self._finished.set()

    @property
    def status(self) -> str:
        """"running", "stopping", or how it ended: "done", "stopped", "failed", "interrupted", "timeout"."""
        if not self._finished.is_set():
            return "stopping" if self._controller.stop_requested_at is not None else "running"
        if self._outcome is None:
            return "failed"
        return final_status(self._outcome)[0]

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the run ends and return its result (or raise its error)."""
        if not self._finished.wait(timeout):
            raise TimeoutError(f"run {self.name!r} is still {self.status} after {timeout}s")
        return self.result

    def stop(self) -> None:
        """Graceful stop at the next step every worker reaches (hard after the grace period)."""
        self._controller.request_stop()

    def kill(self) -> None:
        """Terminate every worker now, and wait until they are gone."""
        self._controller.kill_requested = True
        self._finished.wait()

    @property
    def metrics(self) -> list[dict[str, float]]:
        """The metrics reported so far, one dict per report."""
        return list(self._metrics.rows)

    def metrics_frame(self) -> Any:
        """The metrics as a pandas DataFrame (needs pandas)."""
        import pandas

        return pandas.DataFrame(self.metrics)

    @property
    def result(self) -> Any:
        """The run's result once it ended; raises what the run raised."""
        if not self._finished.is_set():
            raise RuntimeError(f"run {self.name!r} is still {self.status}: use .wait() to wait for its result")
        if self._error is not None:
            raise self._error
        return self._value

    def __repr__(self) -> str:
        return f"<tpu_nb run {self.name!r}: {self.status}>"
