"""Background runs: the workers train while the notebook stays free.

`start_in_background` is the one way `%%tpu_train --background` and
`tpu_nb.launch(background=True)` start: both get the dashboard, the Stop and
Kill buttons with an output area under it (in a notebook kernel), and a
`BackgroundRun` handle. A helper thread follows the run; the handle only
asks the run to stop and reads what the thread left, so it is safe from any
thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from tpu_nb.kernel.endings.notebook_errors import RunEnded
from tpu_nb.kernel.endings.run_ending import Ending
from tpu_nb.kernel.endings.status import HandleStatus
from tpu_nb.kernel.notebook.cell_output import Write, write_to_sys
from tpu_nb.kernel.notebook.frontend import in_notebook_kernel
from tpu_nb.kernel.notebook.returns import Finish, Handback
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.run.followed_run import FollowedRun, RunObserver
from tpu_nb.kernel.run.local_run import Run
from tpu_nb.wire.events import Event, Progress
from tpu_nb.wire.stacks import StackReport
from tpu_nb.workers.processes.programs import Program


class MetricsLog:
    """Every metric rank 0 reported, as rows of {"step": ..., name: value}: one row per step, as on the dashboard."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def on_event(self, event: Event) -> None:
        if not isinstance(event, Progress) or not event.metrics:
            return
        last = self.rows[-1] if self.rows else None
        if last is not None and event.step is not None and last["step"] == event.step:
            row = last  # the rest of the same step: a report too big for one message, or eval after train
        else:
            row = {"step": event.step}
            self.rows.append(row)
        if event.epoch is not None:
            row["epoch"] = event.epoch
        row.update(event.metrics)


def start_in_background(
    program: Program, options: LaunchOptions, name: str, finish: Finish, observers: Sequence[RunObserver] = ()
) -> BackgroundRun:
    """Start a run (its checks first: `LaunchRefused` starts nothing) and return its handle at once; `observers` see its events."""
    return follow_in_background(
        lambda given, write: Run(program, options, f"background run `{name}`", [*given, *observers], write), name, finish
    )


def follow_in_background(make_run: Callable[[list[RunObserver], Write], FollowedRun], name: str, finish: Finish) -> BackgroundRun:
    """Start the run `make_run` builds (on this machine or a pod) and follow it in a helper thread; its handle at once."""
    buttons = None
    if in_notebook_kernel():
        from tpu_nb.kernel.notebook.stop_buttons import StopButtons  # imports ipywidgets: only where widgets show

        buttons = StopButtons()
    write = write_to_sys if buttons is None else buttons.write
    metrics = MetricsLog()
    handle = BackgroundRun(make_run([metrics], write), metrics, name, finish, write)
    try:
        handle.run.start()
    except BaseException:
        handle.run.close()  # what the start did make (a pod run's reaper) goes with it
        raise
    if buttons is not None:
        buttons.show(handle.stop, handle.kill, handle.stacks)
    handle.follow(on_end=None if buttons is None else buttons.disable)
    return handle


class BackgroundRun:
    """The handle of a background run: status, wait, stop, kill, metrics, result, returned."""

    def __init__(self, run: FollowedRun, metrics: MetricsLog, name: str, finish: Finish, write: Write) -> None:
        self.run = run
        self.name = name
        self._metrics = metrics
        self._finish = finish
        self._write = write
        self._ending: Ending | None = None
        self._handback = Handback()
        self._error: BaseException | None = None
        self._finished = threading.Event()

    def follow(self, on_end: Callable[[], object] | None = None) -> None:
        """Follow the started run in a helper thread; `on_end` is called when it has ended."""
        threading.Thread(target=self._follow, args=(on_end,), name=f"tpu_nb-run-{self.name}", daemon=True).start()

    def _follow(self, on_end: Callable[[], object] | None) -> None:
        try:
            while not self.run.ended:
                self.run.poll()
            ending = self._ending = self.run.finish()
            if on_end is not None:
                on_end()
            self._write("stdout", f"tpu_nb: run `{self.name}` ended: {ending.text or ending.status}.\n")
            if ending.error is not None:
                self._error = ending.error
            else:
                self._handback = self._finish(ending, self._write)
                self._error = self._handback.problem
        except BaseException as error:  # noqa: BLE001 - kept for wait()/result, which re-raise it
            self._error = error
        finally:
            self.run.close()
            self._finished.set()

    @property
    def status(self) -> HandleStatus:
        """ "running", "stopping", or how it ended: "done", "stopped", "failed", "interrupted", "timeout"."""
        if not self._finished.is_set():
            return "stopping" if self.run.stopping else "running"
        return "failed" if self._ending is None else self._ending.status

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the run ends and return its result (or raise its error)."""
        if not self._finished.wait(timeout):
            raise TimeoutError(f"run {self.name!r} is still {self.status} after {timeout}s")
        return self.result

    def stop(self) -> None:
        """Graceful stop at the next step every worker reaches (hard only if none comes in the time the run's steps take)."""
        self.run.request_stop()

    def kill(self) -> None:
        """Terminate every worker now, and wait until they are gone."""
        self.run.request_kill()
        self._finished.wait()

    def stacks(self) -> StackReport:
        """Where every rank is now: the line of your cell, the library call it waits in, and a verdict with its fix.

        `print(run.stacks())` for the summary, `.full_stacks()` for every frame.
        """
        if self._finished.is_set():
            raise RunEnded(f"run {self.name!r} has ended ({self.status}): it has no stacks any more.")
        return self.run.stacks()

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """The metrics reported so far, one dict per report."""
        return list(self._metrics.rows)

    def metrics_frame(self) -> Any:
        """The metrics as a pandas DataFrame (needs pandas)."""
        import pandas

        return pandas.DataFrame(self.metrics)

    @property
    def returned(self) -> dict[str, Any]:
        """The `--return` values once the run ended (also when the notebook kept a rebound name)."""
        return dict(self._handback.returned)

    @property
    def result(self) -> Any:
        """The run's result once it ended; raises what the run raised."""
        if not self._finished.is_set():
            raise RuntimeError(f"run {self.name!r} is still {self.status}: use .wait() to wait for its result")
        if self._error is not None:
            raise self._error
        return self._handback.value

    def __repr__(self) -> str:
        return f"<tpu_nb run {self.name!r}: {self.status}>"
