"""tqdm's progress bars drawn as text in a worker, whichever class draws them: a worker's stderr reaches the cell.

In a kernel, tqdm.auto picks tqdm.notebook's class, whose bars are
ipywidgets. A forked worker cannot show a widget: ipykernel drops every
message a fork sends on the kernel's sockets (logging "attempted to send
message from fork" for each) and the notebook shows nothing of tokenising,
TRL's dataset preparation or DPO's reference log-probabilities. `datasets`,
huggingface_hub, accelerate and transformers subclass (or call) the class
tqdm.auto had when they were imported, often in the notebook before the fork,
so renaming tqdm.auto's class in the worker would not reach them. Instead the
worker's copy of tqdm.notebook's class gives up all it adds to tqdm.std's:
every bar made from it or its subclasses is tqdm's text bar on the worker's
stderr (printed_output sends it to the cell), redrawn in place with "\\r" at
most every `mininterval` (0.1 s by default), as tqdm does in a terminal.
The notebook's own tqdm is left as it is.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from tpu_nb.workers.mends.import_hooks import when_imported

NOTEBOOK_MODULE = "tqdm.notebook"


def text_bars() -> None:
    """In this worker process: tqdm.notebook's class draws as tqdm.std's, now or when it is imported (idempotent)."""
    when_imported(NOTEBOOK_MODULE, _drawn_as_text)


def _drawn_as_text(module: ModuleType) -> None:
    notebook_class = module.tqdm_notebook
    if getattr(notebook_class, "_tpu_nb_text", False):
        return
    # Its methods and properties (the widget's __init__, display, close, colour, ...): without them, lookups fall
    # through to tqdm.std's (or, in tqdm.auto's class, tqdm.asyncio's then tqdm.std's) for its subclasses too.
    widget_parts = [name for name, value in vars(notebook_class).items() if callable(value) or isinstance(value, property | staticmethod)]
    for name in widget_parts:
        delattr(notebook_class, name)

    def __init__(self: Any, *args: Any, display: bool = True, **kwargs: Any) -> None:
        # `display` is the widget's own keyword (show it at once or later), which tqdm.std refuses: a text bar draws.
        super(notebook_class, self).__init__(*args, **kwargs)

    notebook_class.__init__ = __init__
    notebook_class._tpu_nb_text = True
