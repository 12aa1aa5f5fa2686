from __future__ import annotations

from support.platforms import MakeSystem

from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.runtime import detect
from tpu_nb.wire.mesh import MeshShape


def test_default_options_have_no_problems() -> None:
    assert LaunchOptions().problems() == []


def test_each_bad_option_is_named_with_its_fix() -> None:
    problems = LaunchOptions(cores=0, timeout=-1).problems()
    assert problems == [
        "cores=0: give a positive number of XLA devices, or leave it out to use all.",
        "timeout=-1: give a positive number of seconds, or leave it out for no limit.",
    ]


def test_a_stop_grace_that_is_not_positive_is_named() -> None:
    assert LaunchOptions(stop_grace=0).problems() == ["stop_grace=0: give a positive number of seconds."]


def test_a_mesh_needs_spmd_and_spmd_has_one_result() -> None:
    assert LaunchOptions(mesh=MeshShape.parse("fsdp=2")).problems() == [
        "mesh=fsdp=2: a mesh is for SPMD runs; add --spmd (spmd=True), or leave the mesh out."
    ]
    assert LaunchOptions(spmd=True, all_results=True).problems() == [
        "all_results=True: an SPMD run has one worker, so there is one result; leave all_results out."
    ]


def test_an_spmd_run_puts_every_device_on_fsdp_unless_told() -> None:
    assert LaunchOptions(spmd=True).mesh_for(8) == MeshShape(("fsdp", "tensor"), (8, 1))
    assert LaunchOptions(spmd=True, mesh=MeshShape.parse("fsdp=2,tensor=4")).mesh_for(8).sizes == (2, 4)


def test_the_compile_cache_defaults_to_the_working_directory_on_colab_and_kaggle_tpus(make_system: MakeSystem) -> None:
    kaggle, colab, laptop = (detect(make_system(name)) for name in ("kaggle_v5e_8", "colab_v5e_1", "cpu_laptop"))
    assert LaunchOptions().compile_cache_for(kaggle) == "/kaggle/working/tpu_nb_xla_cache"
    assert LaunchOptions().compile_cache_for(colab) == "/content/tpu_nb_xla_cache"
    assert LaunchOptions().compile_cache_for(laptop) is None
    assert LaunchOptions(compile_cache="off").compile_cache_for(kaggle) is None
    assert LaunchOptions(compile_cache="/data/cache").compile_cache_for(laptop) == "/data/cache"


def test_an_empty_compile_cache_directory_is_named() -> None:
    assert LaunchOptions(compile_cache=" ").problems() == [
        'compile_cache="": give a directory for the compilation cache, or "off" for none.'
    ]


def test_the_watchdog_is_learned_by_default_fixed_by_a_duration_and_off_by_name() -> None:
    import pytest

    from tpu_nb.kernel.endings.notebook_errors import LaunchRefused
    from tpu_nb.wire.stacks import WatchdogSetting

    assert LaunchOptions.from_user().watchdog == WatchdogSetting(None)
    assert LaunchOptions.from_user(watchdog="90").watchdog == WatchdogSetting(90.0)
    assert LaunchOptions.from_user(watchdog=45).watchdog == WatchdogSetting(45.0)
    assert LaunchOptions.from_user(watchdog="2m").watchdog == WatchdogSetting(120.0)
    assert LaunchOptions.from_user(watchdog="OFF").watchdog is None
    with pytest.raises(LaunchRefused, match=r"--watchdog soon: give a duration such as 90s.*--watchdog off"):
        LaunchOptions.from_user(watchdog="soon")
    assert WatchdogSetting(None).threshold(2.0) == 60.0 and WatchdogSetting(None).threshold(30.0) == 150.0
    assert WatchdogSetting(10.0).threshold(30.0) == 10.0


def test_flops_per_token_must_be_positive() -> None:
    assert LaunchOptions(flops_per_token=0.0).problems() == ["flops_per_token=0.0: give the model's FLOPs per token, a positive number."]
    assert LaunchOptions(flops_per_token=1.2e9).problems() == []
