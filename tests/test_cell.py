"""CellProgram without workers: compile, run with a fake context, apply results."""

from __future__ import annotations

import linecache
import traceback

import pytest
import torch

from tpu_nb.cell import CellProgram, apply_results
from tpu_nb.launcher.program import WorkerContext
from tpu_nb.launcher.transfer import ModuleWeights, NotTransferable

CONTEXT = WorkerContext(rank=0, world_size=1, device=torch.device("cpu"), devices_in_process=1)


def compile_cell(source: str, namespace: dict | None = None, returns: tuple[str, ...] = ()) -> CellProgram:
    return CellProgram.compile(source, "<cell>", {} if namespace is None else namespace, returns, first_line=2)


def test_the_last_expression_is_the_value() -> None:
    parts = compile_cell("x = 20\nx + 1").run(CONTEXT)
    assert parts["value"] == 21


def test_a_trailing_semicolon_hides_the_value_like_a_normal_cell() -> None:
    assert "value" not in compile_cell("x = 20\nx + 1;").run(CONTEXT)


def test_injected_names_and_earlier_cells_are_visible() -> None:
    namespace = {"offset": 5}
    parts = compile_cell("(rank, world_size, offset, str(device), callable(report))", namespace).run(CONTEXT)
    assert parts["value"] == (0, 1, 5, "cpu", True)


def test_functions_from_earlier_cells_see_device_and_rank() -> None:
    namespace: dict = {}
    exec("def where():\n    return rank, str(device)", namespace)
    assert compile_cell("where()", namespace).run(CONTEXT)["value"] == (0, "cpu")


def test_line_numbers_count_the_magic_line() -> None:
    source = "a = 1\nb = 0\nc = a / b\n"
    linecache.cache["<cell>"] = (0, None, ["%%tpu_train\n", *source.splitlines(keepends=True)], "<cell>")
    with pytest.raises(ZeroDivisionError) as raised:
        compile_cell(source).run(CONTEXT)
    frame = traceback.extract_tb(raised.value.__traceback__)[-1]
    assert (frame.lineno, frame.line) == (4, "c = a / b")


def test_returns_on_rank_0_modules_as_weights() -> None:
    model = torch.nn.Linear(2, 2)
    namespace = {"model": model}
    program = compile_cell("losses = [1.0]\nmodel.weight.data.fill_(3.0)", namespace, returns=("model", "losses", "nope"))
    parts = program.run(CONTEXT)
    assert isinstance(parts["return:model"], ModuleWeights)
    assert parts["return:losses"] == [1.0]
    assert parts["missing"] == ("nope",)


def test_other_ranks_send_no_returns() -> None:
    other = WorkerContext(rank=1, world_size=2, device=torch.device("cpu"), devices_in_process=1)
    parts = compile_cell("x = 1", returns=("x",)).run(other)
    assert parts == {}


def test_apply_updates_the_notebook_module_in_place() -> None:
    notebook_model = torch.nn.Linear(2, 2)
    trained = torch.nn.Linear(2, 2)
    namespace = {"model": notebook_model}
    result = apply_results({"return:model": ModuleWeights(trained.state_dict()), "missing": ()}, namespace)
    assert namespace["model"] is notebook_model
    assert torch.equal(notebook_model.weight, trained.weight)
    assert result.updated_in_place == ("model",)


def test_apply_reports_values_that_could_not_come_back() -> None:
    namespace: dict = {}
    parts = {"value": 3, "return:gen": NotTransferable("generator", "<generator>", "cannot pickle 'generator' object"), "return:x": 1, "missing": ("y",)}
    result = apply_results(parts, namespace)
    assert namespace == {"x": 1}
    assert result.value == 3 and result.has_value
    assert result.missing == ("y",)
    assert result.not_transferable == ("gen (cannot pickle 'generator' object)",)


def test_a_syntax_error_is_raised_at_compile_time() -> None:
    with pytest.raises(SyntaxError):
        compile_cell("def broken(:\n    pass")
