"""Stop, Kill and "Where are they?" buttons, and an output area, under a background run's dashboard (ipywidgets)."""

from __future__ import annotations

from collections.abc import Callable

import ipywidgets as widgets
from IPython.display import display

from tpu_nb.kernel.endings.notebook_errors import RunEnded


class StopButtons:
    """Shown in the cell that started a background run while the notebook stays free."""

    def __init__(self) -> None:
        self.stop_button = widgets.Button(description="Stop", icon="stop", tooltip="Stop after the next step, keeping the model")
        self.kill_button = widgets.Button(description="Kill", icon="times", button_style="danger", tooltip="Terminate every worker now")
        self.stacks_button = widgets.Button(
            description="Where are they?", icon="search", tooltip="Every rank's line in your cells, and what it waits for"
        )
        # The cell that started the run has finished: text goes here, not to whatever cell runs now.
        self.output = widgets.Output()
        self.widget = widgets.VBox([widgets.HBox([self.stop_button, self.kill_button, self.stacks_button]), self.output])

    def show(self, stop: Callable[[], object], kill: Callable[[], object], stacks: Callable[[], object]) -> None:
        """Display the buttons (in the current cell), wired to `stop`, `kill` and `stacks` (whose answer is written below)."""
        self.stop_button.on_click(lambda _button: stop())
        self.kill_button.on_click(lambda _button: kill())
        self.stacks_button.on_click(lambda _button: self._show_stacks(stacks))
        display(self.widget)

    def _show_stacks(self, stacks: Callable[[], object]) -> None:
        try:
            report = stacks()
        except RunEnded as error:  # the run ended meanwhile
            self.write("stderr", f"{error}\n")
            return
        self.write("stdout", f"Where are they? {report}\n")

    def write(self, stream: str, text: str) -> None:
        if stream == "stderr":
            self.output.append_stderr(text)
        else:
            self.output.append_stdout(text)

    def disable(self) -> None:
        self.stop_button.disabled = True
        self.kill_button.disabled = True
        self.stacks_button.disabled = True
