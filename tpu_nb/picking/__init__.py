"""The fine-tuning picker: choose a model, a dataset and hyperparameters in a widget.

It checks the choice as you go (every problem at once, `form`), previews
what the model will see (`preview`), takes uploaded files (`uploads`), then
inserts a ready training cell or trains in place (`actions`). Importing this
package is cheap: ipywidgets and the recipes' libraries are imported when a
picker is made (`widget`), because every TPU worker imports tpu_nb.
"Train now" calls `tpu_nb.launch` through the package's face, as a user
would: the one import of the face, which stands above every floor (setup.cfg's
floors contract), from below it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tpu_nb.picking.widget import Picker


def picker(shell: Any = None, directory: str | Path | None = None) -> Picker:
    """A new picker widget (display it, or leave it as a cell's last expression).

    `shell` is the IPython shell whose namespace gets the trained model and
    which inserts cells (default: the running one); `directory` is where it
    looks for data files and local models, and puts uploads (default: the
    working directory).
    """
    from tpu_nb.picking.widget import Picker

    return Picker(shell, None if directory is None else Path(directory))


__all__ = ["picker"]
