"""Keeping TorchTPU's device backend out of the notebook's own process.

torch_tpu reads its environment (which chip, which rank, the topology) once,
when it loads, and `import torch` loads it through torch's backend entry
points when a TPU is on the PCI bus. The workers `%%tpu_train` forks must
load it themselves, each with its chip's environment: so at `%load_ext`,
before the notebook imports torch, torch's autoloading is turned off
(`TORCH_DEVICE_BACKEND_AUTOLOAD=0`, which only the notebook's process and its
children see). When torch_tpu was loaded already, the user is told how to
avoid it (`%tpu_info` shows the same as an error).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"


def keep_torch_tpu_out(environ: MutableMapping[str, str], modules: Mapping[str, object], torch_tpu_installed: bool) -> str | None:
    """Turn autoloading off where torch_tpu is installed; the note for the user when it is loaded already."""
    if not torch_tpu_installed:
        return None
    if "torch_tpu" in modules:
        return (
            "tpu_nb: torch_tpu is already loaded in this notebook (torch was imported before %load_ext tpu_nb, with a TPU "
            "attached), so %%tpu_train cannot give its workers their chips. Restart the kernel and run %load_ext tpu_nb "
            f"first, or set {AUTOLOAD}=0 before importing torch."
        )
    environ.setdefault(AUTOLOAD, "0")
    return None
