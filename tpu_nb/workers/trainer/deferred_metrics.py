"""The metrics a TRL trainer reads from the device at every step, kept on the device until the trainer logs them.

TRL's `compute_loss` gathers each metric across ranks
(`accelerator.gather_for_metrics` / `gather`), reduces it and reads it with
`.item()` into `self._metrics`, which `log()` averages at the logging steps.
On XLA each `.item()` is a host sync: the host waits for the forward pass,
then traces the rest of the step (four per SFT step, a dozen per DPO step).
Here, while `compute_loss` runs, what those two gathers return is a
`DeferredValue`: arithmetic on it builds device tensors, `.item()` hands back
the value itself, and `log()` reads every value it holds in one transfer, at
the step where the Trainer reads its loss anyway. TRL's patterns are kept:
`x / n if n > 0 else 0.0` gives 0 where n is 0 (the division is guarded, a
comparison with a deferred value reads as true). Anything else asked of a
value reads it from the device at once, as TRL would have.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

GATHERS = ("gather_for_metrics", "gather")


class DeferredValue:
    """A metric's device tensor, standing in for the number TRL would have read from it."""

    __slots__ = ("number", "tensor")

    def __init__(self, tensor: Any, number: bool = False) -> None:
        self.tensor = tensor
        self.number = number  # stands for what `.item()` returned: a Python number, not a tensor

    def item(self) -> DeferredValue:
        return DeferredValue(self.tensor, number=True)

    def sum(self, *args: Any, **kwargs: Any) -> DeferredValue:
        return DeferredValue(self.tensor.sum(*args, **kwargs))

    def mean(self, *args: Any, **kwargs: Any) -> DeferredValue:
        return DeferredValue(self.tensor.float().mean(*args, **kwargs))

    def __add__(self, other: Any) -> DeferredValue:
        return DeferredValue(self.tensor + _tensor(other), self.number)

    __radd__ = __add__

    def __sub__(self, other: Any) -> DeferredValue:
        return DeferredValue(self.tensor - _tensor(other), self.number)

    def __mul__(self, other: Any) -> DeferredValue:
        return DeferredValue(self.tensor * _tensor(other), self.number)

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> DeferredValue:
        return DeferredValue(_guarded_division(self.tensor, _tensor(other)), self.number)

    def __floordiv__(self, other: Any) -> DeferredValue:
        return DeferredValue(self.tensor // _tensor(other), self.number)

    def __gt__(self, other: Any) -> bool:
        return True  # `x / n if n > 0 else 0.0`: the division is guarded instead (0 where n is 0)

    # Any other comparison or truth test is read now, as TRL would have read it.
    def __lt__(self, other: Any) -> bool:
        return bool(self._read() < _read(other))

    def __le__(self, other: Any) -> bool:
        return bool(self._read() <= _read(other))

    def __ge__(self, other: Any) -> bool:
        return bool(self._read() >= _read(other))

    def __eq__(self, other: object) -> bool:
        return bool(self._read() == _read(other))

    def __ne__(self, other: object) -> bool:
        return bool(self._read() != _read(other))

    __hash__ = None  # type: ignore[assignment]

    def __bool__(self) -> bool:
        return bool(self._read())

    def _read(self) -> Any:
        return self.tensor.item() if self.tensor.numel() == 1 else self.tensor.cpu()

    def __float__(self) -> float:
        return float(self.tensor.item())

    def __int__(self) -> int:
        return int(self.tensor.item())

    def __getattr__(self, name: str) -> Any:
        # What TRL does with a value beyond the patterns above: read it now, as it would have.
        return getattr(self.tensor.item() if self.number else self.tensor, name)

    def __repr__(self) -> str:
        return f"DeferredValue({self.tensor!r})"


def defer_metric_reads(trainer: Any) -> None:
    """Wrap this trainer's `compute_loss` (its gathers deferred) and `log` (every deferred value read, in one transfer)."""
    compute_loss, log = trainer.compute_loss, trainer.log

    @functools.wraps(compute_loss)
    def deferred_compute_loss(*args: Any, **kwargs: Any) -> Any:
        accelerator = trainer.accelerator
        own = {name: vars(accelerator)[name] for name in GATHERS if name in vars(accelerator)}
        for name in GATHERS:
            setattr(accelerator, name, _deferring(getattr(accelerator, name)))
        try:
            return compute_loss(*args, **kwargs)
        finally:
            for name in GATHERS:
                if name in own:
                    setattr(accelerator, name, own[name])
                else:
                    delattr(accelerator, name)  # the class's method shows again

    @functools.wraps(log)
    def resolving_log(logs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        read_deferred(trainer)
        return log(logs, *args, **kwargs)

    trainer.compute_loss = deferred_compute_loss
    trainer.log = resolving_log


def read_deferred(trainer: Any) -> None:
    """Every deferred value the trainer holds (its metrics, its token count) replaced by its number, in one transfer."""
    places: list[tuple[list[Any], int]] = [
        (values, index)
        for by_name in trainer._metrics.values()
        for values in by_name.values()
        for index, value in enumerate(values)
        if isinstance(value, DeferredValue)
    ]
    tokens = getattr(trainer, "_total_train_tokens", None)
    deferred = [values[index] for values, index in places] + ([tokens] if isinstance(tokens, DeferredValue) else [])
    if not deferred:
        return
    import torch

    numbers = torch.stack([value.tensor.double().reshape(()) for value in deferred]).cpu().tolist()
    for (values, index), number in zip(places, numbers, strict=False):
        values[index] = number
    if isinstance(tokens, DeferredValue):
        trainer._total_train_tokens = int(numbers[-1])


def _deferring(gather: Callable[..., Any]) -> Callable[..., Any]:
    def deferred(value: Any) -> Any:
        gathered = gather(value)
        return DeferredValue(gathered) if _is_tensor(gathered) else gathered

    return deferred


def _guarded_division(numerator: Any, denominator: Any) -> Any:
    import torch

    if not _is_tensor(denominator):
        return numerator / denominator
    quotient = numerator / torch.where(denominator == 0, torch.ones_like(denominator), denominator)
    return torch.where(denominator == 0, torch.zeros_like(quotient), quotient)


def _read(value: Any) -> Any:
    return value._read() if isinstance(value, DeferredValue) else value


def _tensor(value: Any) -> Any:
    return value.tensor if isinstance(value, DeferredValue) else value


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)
