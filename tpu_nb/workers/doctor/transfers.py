"""The shapes the user's code moves to the device (`x.to(device)`), by the call that moves them.

torch_xla's analysis says where a graph was compiled but not for which
shapes; a step compiled once per input shape shows here as one call moving
tensors of several shapes. Installed in each worker (a throwaway fork, so
wrapping `torch.Tensor.to` touches no one else's state). A call that does
not move a host tensor to an XLA device costs two attribute reads; only
calls made directly from the user's code are recorded (not `Module.to`'s
weights, nor a library's).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

from tpu_nb.workers.doctor.analysis_log import Frame
from tpu_nb.workers.doctor.places import first_user_frame

Shape = tuple[int, ...]
TransferSite = tuple[Frame, tuple[Shape, ...]]  # a call in the user's code, and the distinct shapes it moved, in order

_MOST_SITES = 32
_MOST_SHAPES = 16


class TransferWatch:
    """Distinct shapes of host tensors the user's code moved to an XLA device, per calling site."""

    def __init__(self) -> None:
        # (line, bytecode offset): two calls on one line (`x, y = x.to(d), y.to(d)`) are two sites.
        self._sites: dict[tuple[Frame, int], dict[Shape, None]] = {}
        self._lock = threading.Lock()

    def install(self) -> None:
        import torch

        torch.Tensor.to = self._watched(torch.Tensor.to)  # type: ignore[method-assign]

    def sites(self) -> tuple[TransferSite, ...]:
        """Each calling site with the shapes it moved (read from another thread)."""
        with self._lock:
            return tuple((frame, tuple(shapes)) for (frame, _offset), shapes in self._sites.items())

    def _watched(self, to: Callable[..., Any]) -> Callable[..., Any]:
        watch = self

        def watched_to(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            moved = to(tensor, *args, **kwargs)
            if moved.device.type == "xla" and tensor.device.type != "xla":
                caller = sys._getframe(1)
                frame = Frame(caller.f_code.co_name, caller.f_code.co_filename, caller.f_lineno)
                if first_user_frame((frame,)) is frame:
                    watch._saw((frame, caller.f_lasti), tuple(moved.shape))
            return moved

        watched_to.__name__ = to.__name__
        watched_to.__doc__ = to.__doc__
        return watched_to

    def _saw(self, site: tuple[Frame, int], shape: Shape) -> None:
        with self._lock:
            shapes = self._sites.get(site)
            if shapes is None:
                if len(self._sites) >= _MOST_SITES:
                    return
                shapes = self._sites[site] = {}
            if shape not in shapes:
                if len(shapes) >= _MOST_SHAPES:
                    del shapes[next(reversed(shapes))]  # keep the first, make room for the newest
                shapes[shape] = None
