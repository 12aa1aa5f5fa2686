"""Mixture-of-experts layers on XLA: transformers' default "grouped_mm" experts run as "eager" for XLA tensors.

transformers 5 runs a MoE model's experts through `grouped_mm` unless told
otherwise; it counts tokens per expert with `torch.histc` on int expert ids
wherever the device is not the CPU, and XLA sends that op to the CPU, which
has no int histogram: the first step raises `"histogram_cpu" not implemented
for 'Int'` (measured on Mixtral and Qwen3-MoE). "eager" (each expert's
tokens gathered in a loop) trains on XLA; the tokens an expert gets change
from step to step, so its shapes do too, which the XLA doctor then names.
In a worker, an experts layer asked for "grouped_mm" runs "eager" when its
input is on an XLA device; any other choice is left as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from tpu_nb.workers.cell_api import reporting

MOE_MODULE = "transformers.integrations.moe"
NOTICE = (
    "mixture of experts: transformers' default experts implementation (grouped_mm) fails on XLA (torch.histc on int "
    "expert ids), so the experts run as experts_implementation='eager'"
)


def eager_experts_on_xla(module: ModuleType) -> None:
    """`module` is transformers.integrations.moe, just imported (or before the fork)."""
    interface_class = getattr(module, "ExpertsInterface", None)
    if interface_class is None or getattr(interface_class, "_tpu_nb_patched", False):
        return
    original_get = interface_class.get_interface

    def get_interface(self: Any, experts_implementation: str, default: Callable[..., Any]) -> Callable[..., Any]:
        chosen = original_get(self, experts_implementation, default)
        return _eager_for_xla(chosen, default) if experts_implementation == "grouped_mm" else chosen

    interface_class.get_interface = get_interface
    interface_class._tpu_nb_patched = True


def _eager_for_xla(chosen: Callable[..., Any], eager: Callable[..., Any]) -> Callable[..., Any]:
    def experts_forward(layer: Any, hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(hidden_states.device, "type", None) != "xla":
            return chosen(layer, hidden_states, *args, **kwargs)
        reporting.notice(NOTICE)
        return eager(layer, hidden_states, *args, **kwargs)

    return experts_forward
