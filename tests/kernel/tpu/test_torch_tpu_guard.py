"""torch_tpu kept out of the notebook's process: autoloading off at %load_ext where it is installed, a note where it is loaded."""

from __future__ import annotations

import types

from tpu_nb.kernel.tpu.torch_tpu_guard import AUTOLOAD, keep_torch_tpu_out, let_torch_tpu_back


def test_where_torch_tpu_is_installed_autoloading_is_turned_off_before_torch_is_imported() -> None:
    environ: dict[str, str] = {}
    assert keep_torch_tpu_out(environ, {}, torch_tpu_installed=True) is None
    assert environ == {AUTOLOAD: "0"}
    chosen = {AUTOLOAD: "1"}  # the user's own setting is theirs
    keep_torch_tpu_out(chosen, {}, torch_tpu_installed=True)
    assert chosen == {AUTOLOAD: "1"}


def test_unloading_takes_back_only_what_tpu_nb_set() -> None:
    environ: dict[str, str] = {"HOME": "/root"}
    keep_torch_tpu_out(environ, {}, torch_tpu_installed=True)
    let_torch_tpu_back(environ)
    assert environ == {"HOME": "/root"}
    chosen = {AUTOLOAD: "0"}  # the user turned it off before %load_ext: theirs, kept
    keep_torch_tpu_out(chosen, {}, torch_tpu_installed=True)
    let_torch_tpu_back(chosen)
    assert chosen == {AUTOLOAD: "0"}
    changed: dict[str, str] = {}
    keep_torch_tpu_out(changed, {}, torch_tpu_installed=True)
    changed[AUTOLOAD] = "1"  # the user changed it since
    let_torch_tpu_back(changed)
    assert changed == {AUTOLOAD: "1"}


def test_without_torch_tpu_nothing_changes() -> None:
    environ: dict[str, str] = {}
    assert keep_torch_tpu_out(environ, {}, torch_tpu_installed=False) is None and environ == {}


def test_torch_tpu_loaded_already_gets_a_note_with_the_fix() -> None:
    loader = types.ModuleType("torch_tpu._loader")
    loader._LOADED = True  # type: ignore[attr-defined]  # set up its device: a TPU was attached
    environ: dict[str, str] = {}
    note = keep_torch_tpu_out(environ, {"torch": types.ModuleType("torch"), "torch_tpu._loader": loader}, True)
    assert note is not None and "restart the kernel and run %load_ext tpu_nb first" in note and f"{AUTOLOAD}=0" in note
    assert environ == {}
