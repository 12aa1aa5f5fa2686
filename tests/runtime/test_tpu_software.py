"""Which TPU stack %%tpu_train uses: torch_xla or TorchTPU, chosen by what works with the installed torch, or asked for."""

from __future__ import annotations

from tpu_nb.runtime import Versions
from tpu_nb.runtime.tpu_software import choose_stack, stack_statuses


def versions(
    torch: str | None = "2.9.0", torch_xla: str | None = "2.9.0", libtpu: str | None = "0.0.21", torch_tpu: str | None = None
) -> Versions:
    return Versions("3.12.3", torch, torch_xla, libtpu, "5.15.0", torch_tpu)


def test_colabs_image_uses_torch_xla_and_says_what_torch_tpu_would_need() -> None:
    choice = choose_stack(versions())
    assert choice.chosen == "torch_xla" and choice.why == "torch_xla is the stack that works with torch 2.9.0"
    tpu = choice.status("torch_tpu")
    assert not tpu.works and tpu.version is None and tpu.missing == "not installed (it needs torch 2.11 to 2.15)"
    assert tpu.fix is not None and "torch-tpu" in tpu.fix and "environment of its own" in tpu.fix


def test_an_environment_of_torch_2_14_with_torch_tpu_and_libtpu_uses_torch_tpu() -> None:
    choice = choose_stack(versions("2.14.1", None, "0.0.52", "0.2.0"))
    assert choice.chosen == "torch_tpu" and choice.used.works
    assert choice.why == "TorchTPU is the stack that works with torch 2.14.1"
    assert choice.status("torch_xla").missing == "not installed"


def test_torch_tpu_beside_an_old_torch_or_without_libtpu_says_what_is_missing() -> None:
    old_torch = choose_stack(versions("2.9.0+cpu", None, "0.0.21", "0.2.0"))
    assert old_torch.chosen == "torch_tpu" and old_torch.why == "torch_tpu is the only TPU stack installed"
    assert old_torch.used.missing == "it needs torch 2.11 to 2.15, and torch 2.9.0+cpu is installed"
    no_libtpu = stack_statuses(versions("2.12.0", None, None, "0.2.0"))[1]
    assert no_libtpu.missing == "libtpu is not installed" and no_libtpu.fix == "pip install 'libtpu>=0.0.50'"
    too_new = stack_statuses(versions("2.16.0", None, "0.0.52", "0.2.0"))[1]
    assert too_new.missing is not None and "torch 2.16.0 is installed" in too_new.missing


def test_both_stacks_installed_the_one_that_matches_torch_is_used_and_an_option_overrides() -> None:
    both = versions("2.9.0", "2.9.0", "0.0.21", "0.2.0")
    choice = choose_stack(both)
    assert choice.chosen == "torch_xla" and not choice.status("torch_tpu").works
    asked = choose_stack(both, "torch_tpu")
    assert asked.chosen == "torch_tpu" and asked.why == "asked for with --stack" and not asked.used.works
    mismatched = choose_stack(versions("2.14.1", "2.9.0", "0.0.52", "0.2.0"))  # torch upgraded under torch_xla
    assert (
        mismatched.chosen == "torch_tpu" and mismatched.status("torch_xla").missing == "it needs torch 2.9, and torch 2.14.1 is installed"
    )


def test_nothing_installed_defaults_to_torch_xla() -> None:
    choice = choose_stack(versions("2.9.0", None, None, None))
    assert choice.chosen == "torch_xla" and choice.why == "no TPU stack works here yet; torch_xla is the default"
