"""Programs run with a fake worker context: a cell's value, its names, its returns; a function's value."""

from __future__ import annotations

import linecache
import traceback
from typing import Any

import pytest
import torch

from tpu_nb.wire.results import ModuleWeights, RankResult
from tpu_nb.workers.cell_api.reporting import StopTraining
from tpu_nb.workers.processes.programs import CellProgram, FunctionProgram, WorkerContext, compile_cell, uses_trainer

CONTEXT = WorkerContext(rank=0, world_size=1, device=torch.device("cpu"), devices_in_process=1)


def cell(source: str, namespace: dict[str, Any] | None = None, returns: tuple[str, ...] = ()) -> CellProgram:
    return compile_cell(source, "<cell>", {} if namespace is None else namespace, returns, first_line=2)


def test_the_last_expression_is_the_value() -> None:
    assert cell("x = 20\nx + 1").run(CONTEXT) == RankResult(21, has_value=True)


def test_a_trailing_semicolon_hides_the_value_like_a_normal_cell() -> None:
    assert not cell("x = 20\nx + 1;").run(CONTEXT).has_value


def test_injected_names_and_earlier_cells_are_visible() -> None:
    namespace = {"offset": 5}
    result = cell("(rank, world_size, offset, str(device), callable(report))", namespace).run(CONTEXT)
    assert result.value == (0, 1, 5, "cpu", True)


def test_functions_from_earlier_cells_see_device_and_rank() -> None:
    namespace: dict[str, Any] = {}
    exec("def where():\n    return rank, str(device)", namespace)
    assert cell("where()", namespace).run(CONTEXT).value == (0, "cpu")


def test_two_devices_in_one_process_get_their_own_names() -> None:
    namespace: dict[str, Any] = {}
    shared = WorkerContext(rank=1, world_size=2, device=torch.device("cpu"), devices_in_process=2)
    assert cell("rank").run(shared).value == 1
    assert "rank" not in namespace


def test_line_numbers_count_the_magic_line() -> None:
    source = "a = 1\nb = 0\nc = a / b\n"
    linecache.cache["<cell>"] = (0, None, ["%%tpu_train\n", *source.splitlines(keepends=True)], "<cell>")
    with pytest.raises(ZeroDivisionError) as raised:
        cell(source).run(CONTEXT)
    frame = traceback.extract_tb(raised.value.__traceback__)[-1]
    assert (frame.lineno, frame.line) == (4, "c = a / b")


def test_returns_on_rank_0_modules_as_weights() -> None:
    namespace = {"model": torch.nn.Linear(2, 2)}
    result = cell("losses = [1.0]\nmodel.weight.data.fill_(3.0)", namespace, returns=("model", "losses", "nope")).run(CONTEXT)
    assert isinstance(result.returned["model"], ModuleWeights)
    assert torch.equal(result.returned["model"].state_dict["weight"], torch.full((2, 2), 3.0))
    assert result.returned["losses"] == [1.0]
    assert result.missing == ("nope",)


def test_returned_weights_are_the_modules_own_tensors_with_tied_ones_one_object() -> None:
    # Copied to the host only as they are written (a tensor at a time); a tied tensor is then written once.
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10))
    model[1].weight = model[0].weight
    result = cell("model[1].bias.data.fill_(1.0)", {"model": model}, returns=("model",)).run(CONTEXT)
    state = result.returned["model"].state_dict
    assert list(state) == ["0.weight", "1.weight", "1.bias"]
    assert state["0.weight"] is state["1.weight"] is model[0].weight and state["1.bias"] is model[1].bias


def test_other_ranks_send_no_returns() -> None:
    other = WorkerContext(rank=1, world_size=2, device=torch.device("cpu"), devices_in_process=1)
    assert cell("x = 1", returns=("x",)).run(other) == RankResult()


def test_a_graceful_stop_ends_the_cell_and_still_returns() -> None:
    namespace = {"StopTraining": StopTraining}
    result = cell("x = 1\nraise StopTraining('stopped by the user at step 3')\nx = 2\nx", namespace, returns=("x",)).run(CONTEXT)
    assert not result.has_value
    assert result.returned == {"x": 1}


def test_a_function_program_returns_the_functions_value() -> None:
    assert FunctionProgram(sum, ([1, 2, 3],)).run(CONTEXT) == RankResult(6, has_value=True)


def test_a_function_stopped_gracefully_returns_none() -> None:
    def train() -> int:
        raise StopTraining("stopped by the user at step 3")

    assert FunctionProgram(train, ()).run(CONTEXT) == RankResult(None, has_value=True)


def test_a_program_that_names_a_trainer_is_told_apart_from_a_hand_written_loop() -> None:
    trainer_cell = compile_cell("from transformers import Trainer\ntrainer = Trainer(model=model)\ntrainer.train()", "In [3]", {}, ())
    sft_cell = compile_cell("def fit():\n    return trl.SFTTrainer(model).train()\nfit()", "In [4]", {}, ())
    loop_cell = compile_cell("for step in range(3):\n    loss = model(x).sum()\n    report(step=step, loss=loss)", "In [5]", {}, ())
    assert uses_trainer(trainer_cell) and uses_trainer(sft_cell) and not uses_trainer(loop_cell)

    def train_with_a_trainer() -> None:
        from transformers import Trainer

        Trainer(model=None).train()

    assert uses_trainer(FunctionProgram(train_with_a_trainer, ())) and not uses_trainer(FunctionProgram(print, ()))
