"""Where the user's code reads XLA tensors' values on the host (`.item()`, `.tolist()`), line by line.

A read after the step's graph ran compiles nothing, so torch_xla's analysis
never names its line; this does. Installed in each worker (a throwaway fork,
so wrapping `torch.Tensor` methods there touches no one else's state).
Only a read called directly from the user's code is placed. Reads by other
libraries (the Trainer reads its loss, grad norm and learning rate at each
logging step) are counted apart, so the doctor can leave them out; tpu_nb's
own (report()'s lazy loss) are counted by `reporting`.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from tpu_nb.workers.doctor.analysis_log import Frame
from tpu_nb.workers.doctor.places import first_user_frame, is_tpu_nb

_READERS = ("item", "tolist")


class HostReadWatch:
    """Counts host reads of XLA tensors by the user's line that made them."""

    def __init__(self) -> None:
        self._places: Counter[Frame] = Counter()
        self.library_reads = 0
        self._lock = threading.Lock()

    def install(self) -> None:
        import torch

        for name in _READERS:
            setattr(torch.Tensor, name, self._watched(getattr(torch.Tensor, name)))

    def places(self) -> tuple[tuple[Frame, int], ...]:
        """(line, reads) by the most reads first."""
        with self._lock:
            return tuple(self._places.most_common())

    def _watched(self, read: Callable[..., Any]) -> Callable[..., Any]:
        watch = self

        def reader(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if tensor.device.type == "xla":
                caller = sys._getframe(1)
                frame = Frame(caller.f_code.co_name, caller.f_code.co_filename, caller.f_lineno)
                with watch._lock:
                    if first_user_frame((frame,)) is frame:
                        watch._places[frame] += 1
                    elif not is_tpu_nb(frame.filename):
                        watch.library_reads += 1
            return read(tensor, *args, **kwargs)

        reader.__name__ = read.__name__
        reader.__doc__ = read.__doc__
        return reader
