"""One declaration of the launch options: the magic, `launch()`, `tpu_nb.pod.launch()` and `LaunchOptions` agree with it."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytest
from test_checkpoint_plans import saved

import tpu_nb
import tpu_nb.pod
from tpu_nb.kernel.planning.declared_options import OPTION_NAMED, OPTIONS, check_keywords, given, options_of
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.pod.slice_checks import PodTarget
from tpu_nb.magics import TpuMagics
from tpu_nb.runtime.info import STACK_NAMES
from tpu_nb.workers.processes.chip_ranks import EXECUTION_MODES


def _magic_actions() -> dict[str, argparse.Action]:
    parser = TpuMagics.tpu_train.parser  # type: ignore[attr-defined]  # set by magic_arguments
    return {action.dest: action for action in parser._actions if action.dest != "help"}


def test_the_magic_takes_exactly_the_declared_cell_options_under_their_flags_and_defaults() -> None:
    actions = _magic_actions()
    assert list(actions) == [option.name for option in options_of("cell")]
    for option in options_of("cell"):
        action = actions[option.name]
        assert action.option_strings == [option.flag], option.name
        expected = list(option.default) if option.kind is list else option.default
        assert action.default == expected, option.name


def test_each_python_surface_shows_the_declared_options_as_keywords_with_their_defaults() -> None:
    for function, surface, leading in (
        (tpu_nb.launch, "launch", ["fn", "args"]),
        (tpu_nb.pod.launch, "pod_launch", ["train", "pod"]),
    ):
        parameters = inspect.signature(function).parameters
        assert list(parameters) == leading + [option.name for option in options_of(surface)]  # type: ignore[arg-type]
        for option in options_of(surface):  # type: ignore[arg-type]
            assert parameters[option.name].default == option.default
            assert option.name in (function.__doc__ or "")


def test_python_shows_what_an_option_takes_beyond_the_magics_text() -> None:
    parameters = inspect.signature(tpu_nb.launch).parameters
    assert str(parameters["trials"].annotation) == "str | Sequence[Mapping[str, Any]] | optuna.Study | None"
    assert str(parameters["space"].annotation) == "str | Callable[[optuna.Trial], Mapping[str, Any]] | None"
    assert str(parameters["n_trials"].annotation) == "int | None"


def test_every_option_is_taken_somewhere_and_the_names_are_one_vocabulary() -> None:
    assert len(OPTION_NAMED) == len(OPTIONS)
    for option in OPTIONS:
        assert option.surfaces, option.name
        # The flag is the name with dashes, "--no-" for a switch that is on by default, and --return (a Python keyword).
        assert option.flag.removeprefix("--").removeprefix("no-").replace("-", "_") in (option.name, "return"), option.name


def test_the_declared_choices_are_the_stacks_and_modes_the_code_knows() -> None:
    assert OPTION_NAMED["stack"].choices == ("auto", *STACK_NAMES)
    assert OPTION_NAMED["mode"].choices == EXECUTION_MODES


def test_every_run_option_reaches_launch_options(tmp_path: Path) -> None:
    """A run option the declaration has and `LaunchOptions` ignores would be taken and then lost."""
    non_default: dict[str, Any] = {
        "cores": 2,
        "timeout": 30.0,
        "all_ranks_output": True,
        "progress": False,
        "all_results": True,
        "stop_grace": 9.0,
        "spmd": True,
        "mesh": "fsdp=2",
        "doctor": False,
        "flops_per_token": 1.2e9,
        "compile_cache": str(tmp_path / "cache"),
        "checkpoint": str(tmp_path / "checkpoints"),
        "every": "10steps",
        "keep": 3,
        "budget": "1GB",
        "deadline": "1h",
        "watchdog": "90",
        "stack": "torch_tpu",
        "mode": "eager",
        "run_log": str(tmp_path / "runs"),
    }
    assert set(non_default) | {"resume"} == {option.name for option in OPTIONS if option.part == "run"}
    for name, value in non_default.items():
        # every, keep and budget are read with --checkpoint only
        context = {"checkpoint": str(tmp_path / "checkpoints")} if name in ("every", "keep", "budget") else {}
        before = dataclasses.asdict(LaunchOptions.from_user(**context))
        after = dataclasses.asdict(LaunchOptions.from_user(**{**context, name: value}))
        assert after != before, f"{name}={value!r} changed nothing in LaunchOptions"
    earlier = tmp_path / "earlier"
    saved(earlier, 100)
    resumed = LaunchOptions.from_user(checkpoint=str(earlier), resume=True).checkpoints
    assert resumed is not None and resumed.resume_from == str(earlier / "checkpoint-100")


def test_defaults_come_from_the_declaration() -> None:
    assert LaunchOptions().stop_grace == OPTION_NAMED["stop_grace"].default
    assert LaunchOptions.from_user().stop_grace == OPTION_NAMED["stop_grace"].default
    target = PodTarget(name="slice")
    for option in options_of("pod_launch", "pod"):
        assert getattr(target, option.name) == option.default, option.name
    assert given("launch", "run", {"keep": 5})["keep"] == 5
    assert given("launch", "run", {})["keep"] == OPTION_NAMED["keep"].default


def test_a_mistyped_keyword_is_a_type_error_naming_the_nearest_option() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'chekpoint'; did you mean 'checkpoint'"):
        tpu_nb.launch(print, chekpoint="/tmp/x")
    with pytest.raises(TypeError, match="did you mean 'kill_stale'"):
        tpu_nb.pod.launch("pass", "slice", kill_stal=True)
    with pytest.raises(TypeError, match="'cores'"):  # taken by launch() only: a pod uses every core
        check_keywords("tpu_nb.pod.launch", "pod_launch", ["cores"])


def test_help_names_other_options_as_each_surface_spells_them() -> None:
    every = OPTION_NAMED["every"]
    assert "With --checkpoint:" in every.help_for("cell")
    assert "With `checkpoint`:" in every.help_for("launch")
    assert "--no-progress" in TpuMagics.tpu_train.__doc__  # type: ignore[operator]
