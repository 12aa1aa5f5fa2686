"""Keeping TorchTPU's device backend out of the notebook's own process.

`import torch` loads torch_tpu through torch's backend entry points when a
TPU is on the PCI bus, and with it libtpu and its threads; torch_tpu reads
some of its variables once, at load. The workers `%%tpu_train` forks are
better off loading it themselves, each with its chip's environment: so at
`%load_ext`, before the notebook imports torch, torch's autoloading is turned
off (`TORCH_DEVICE_BACKEND_AUTOLOAD=0`, which only the notebook's process and
its children see). When torch_tpu was loaded already, the user is told how
to avoid it (`%tpu_info` says the same; an error once a TPU was used there).
`%unload_ext tpu_nb` takes the variable back out, if tpu_nb set it.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

from tpu_nb.runtime.system import torch_tpu_backend_loaded

AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"

_turned_off: set[int] = set()
"""The environments (by id) in which tpu_nb set AUTOLOAD, not the user."""


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
    if AUTOLOAD not in environ:
        environ[AUTOLOAD] = "0"
        _turned_off.add(id(environ))
    return None


def let_torch_tpu_back(environ: MutableMapping[str, str]) -> None:
    """`%unload_ext`: AUTOLOAD goes if tpu_nb set it (and it is still tpu_nb's "0"); a value the user set stays."""
    if id(environ) in _turned_off and environ.get(AUTOLOAD) == "0":
        del environ[AUTOLOAD]
    _turned_off.discard(id(environ))
