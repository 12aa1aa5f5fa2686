"""What tpu_nb changes in other libraries inside a worker so that their defaults work there.

Each module names the failure or the cost it removes, measured, and changes
only the forked worker's copy of the library, never the notebook's:
hub_kernels (transformers' hub kernels, unknown to XLA), checkpointing
(activation checkpointing through torch_xla's own), autocast (attention under
bf16 autocast), causal_masks (decoder masks without a host sync), experts (mixture-of-experts layers),
progress_bars (tqdm's notebook bars drawn as text); `import_hooks` applies a mend when its library is imported.
"""

from __future__ import annotations

from tpu_nb.workers.mends.autocast import attention_in_autocast_dtype
from tpu_nb.workers.mends.causal_masks import MASKS_MODULE, trace_xla_masks
from tpu_nb.workers.mends.checkpointing import checkpoint_through_torch_xla
from tpu_nb.workers.mends.experts import MOE_MODULE, eager_experts_on_xla
from tpu_nb.workers.mends.hub_kernels import keep_hub_kernels_off_xla
from tpu_nb.workers.mends.import_hooks import when_imported


def mend_libraries_for_xla() -> None:
    """In this torch_xla worker process, once, before the user's code runs."""
    keep_hub_kernels_off_xla()
    checkpoint_through_torch_xla()
    attention_in_autocast_dtype()
    when_imported(MASKS_MODULE, trace_xla_masks)
    when_imported(MOE_MODULE, eager_experts_on_xla)
