"""Keeping TorchTPU's device backend out of the notebook's own process.

`import torch` loads torch_tpu through torch's backend entry points when a
TPU is on the PCI bus, and with it libtpu and its threads; torch_tpu reads
some of its variables once, at load. The workers `%%tpu_train` forks are
better off loading it themselves, each with its chip's environment: so at
`%load_ext`, before the notebook imports torch, torch's autoloading is turned
off (`TORCH_DEVICE_BACKEND_AUTOLOAD=0`, which only the notebook's process and
its children see). When torch_tpu was loaded already, the user is told how
to avoid it (`%tpu_info` says the same; an error once a TPU was used there).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

from tpu_nb.runtime.system import torch_tpu_backend_loaded

AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"


def keep_torch_tpu_out(environ: MutableMapping[str, str], modules: Mapping[str, object], torch_tpu_installed: bool) -> str | None:
    """Turn autoloading off where torch_tpu is installed; the note for the user when it is loaded already."""
    if not torch_tpu_installed:
        return None
    if torch_tpu_backend_loaded(modules):
        return (
            "tpu_nb: torch_tpu is already loaded in this notebook (torch was imported before %load_ext tpu_nb, with a TPU "
            "attached): the workers %%tpu_train forks inherit it with libtpu's threads. For a clean start, restart the kernel "
            f"and run %load_ext tpu_nb first, or set {AUTOLOAD}=0 before importing torch."
        )
    environ.setdefault(AUTOLOAD, "0")
    return None
