"""Counting the tokens and samples a rank feeds its model, step by step, without waiting for the device.

A count given as a number (or a tensor on the host) is added on the host. A
count still on the device (a lazy XLA tensor such as `mask.sum()`, or one on
a TorchTPU chip) is summed there: the sum rides in the step's own graph, and
its value is read with the step's other values once the step has run
(`reporting`'s step closure, or TorchTPU's copies), never on its own.
"""

from __future__ import annotations

import threading
from typing import Any

HOST_TOKENS = "tpu_nb tokens"
DEVICE_TOKENS = "tpu_nb tokens on the device"
HOST_SAMPLES = "tpu_nb samples"
DEVICE_SAMPLES = "tpu_nb samples on the device"
"""Keys of a report's values that hold the counts (no keyword argument can be named so: never a user's metric)."""
COUNT_KEYS = frozenset({HOST_TOKENS, DEVICE_TOKENS, HOST_SAMPLES, DEVICE_SAMPLES})


class StepCounts:
    """One rank's tokens and samples so far: on the host as numbers, on the device as one running sum each."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the rank's thread and, at the run's end, the reporter's flush
        self._host = {HOST_TOKENS: 0, HOST_SAMPLES: 0}
        self._device: dict[str, Any] = {}
        self._counting: set[str] = set()  # which of tokens and samples were ever given
        self.flops_per_token: float | None = None  # the model's, at the latest batch's length (a Trainer's)

    def add(self, tokens: Any = None, samples: Any = None) -> None:
        """Add this step's counts (None: not counted), each a number or a tensor."""
        with self._lock:
            for count, host, device in ((tokens, HOST_TOKENS, DEVICE_TOKENS), (samples, HOST_SAMPLES, DEVICE_SAMPLES)):
                if count is None:
                    continue
                self._counting.add(host)
                if _on_device(count):
                    kept = self._device.get(device)
                    self._device[device] = count.detach() if kept is None else kept + count.detach()
                else:
                    self._host[host] += int(count.item() if hasattr(count, "item") else count)

    def values(self) -> dict[str, Any]:
        """The counts so far as a report's values (device sums as tensors, read with the step's other values); {} if none."""
        with self._lock:
            kept: dict[str, Any] = {name: self._host[name] for name in self._counting}
            kept.update(self._device)
            return kept


def counted_from(values: dict[str, Any]) -> tuple[int | None, int | None]:
    """(tokens, samples) in a report's values once read (device sums as numbers by now); None where not counted."""

    def total(host: str, device: str) -> int | None:
        if host not in values and device not in values:
            return None
        return int(values.get(host, 0)) + int(values.get(device, 0))

    return total(HOST_TOKENS, DEVICE_TOKENS), total(HOST_SAMPLES, DEVICE_SAMPLES)


def _on_device(count: Any) -> bool:
    device = getattr(count, "device", None)
    return getattr(device, "type", "cpu") != "cpu"
