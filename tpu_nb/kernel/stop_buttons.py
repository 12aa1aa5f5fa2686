"""Stop and Kill buttons, and an output area, under a background run's dashboard (ipywidgets)."""

from __future__ import annotations

from collections.abc import Callable

import ipywidgets as widgets
from IPython.display import display


class StopButtons:
    """Shown in the cell that started a background run while the notebook stays free."""

    def __init__(self) -> None:
        self.stop_button = widgets.Button(description="Stop", icon="stop", tooltip="Stop after the next step, keeping the model")
        self.kill_button = widgets.Button(description="Kill", icon="times", button_style="danger", tooltip="Terminate every worker now")
        # The cell that started the run has finished: text goes here, not to whatever cell runs now.
        self.output = widgets.Output()
        self.widget = widgets.VBox([widgets.HBox([self.stop_button, self.kill_button]), self.output])

    def show(self, stop: Callable[[], object], kill: Callable[[], object]) -> None:
        """Display the buttons (in the current cell), wired to `stop` and `kill`."""
        self.stop_button.on_click(lambda _button: stop())
        self.kill_button.on_click(lambda _button: kill())
        display(self.widget)

    def write(self, stream: str, text: str) -> None:
        if stream == "stderr":
            self.output.append_stderr(text)
        else:
            self.output.append_stdout(text)

    def disable(self) -> None:
        self.stop_button.disabled = True
        self.kill_button.disabled = True
