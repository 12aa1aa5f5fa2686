"""A %%tpu_train cell compiled here, and what rank 0 hands back applied to the notebook."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tpu_nb.kernel.notebook.returns import apply_returns, bindings
from tpu_nb.wire.results import ModuleWeights, NotTransferable, RankResult
from tpu_nb.workers.processes.programs import compile_cell


def test_the_trailing_expression_is_compiled_apart() -> None:
    with_value = compile_cell("x = 1\nx + 1", "<cell>", {}, ())
    without = compile_cell("x = 1\nx + 1;", "<cell>", {}, ())
    assert with_value.last_expression is not None and without.last_expression is None


def test_return_names_bound_to_a_module_in_the_notebook_are_marked() -> None:
    program = compile_cell("pass", "<cell>", {"model": torch.nn.Linear(1, 1), "data": [1]}, ("model", "data", "later"))
    assert program.notebook_modules == frozenset({"model"})


def test_a_syntax_error_is_raised_at_compile_time_with_the_cells_line_numbers() -> None:
    with pytest.raises(SyntaxError) as raised:
        compile_cell("x = 1\ndef broken(:\n    pass", "<cell>", {}, (), first_line=2)
    assert raised.value.lineno == 3


def test_apply_updates_the_notebook_module_in_place() -> None:
    notebook_model, trained = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    namespace: dict[str, Any] = {"model": notebook_model}
    applied = apply_returns(RankResult(returned={"model": ModuleWeights(trained.state_dict())}), namespace)
    assert namespace["model"] is notebook_model
    assert torch.equal(notebook_model.weight, trained.weight)
    assert applied.updated_in_place == ("model",)


def test_apply_reports_values_that_could_not_come_back() -> None:
    namespace: dict[str, Any] = {}
    gone = NotTransferable("generator", "<generator>", "cannot pickle 'generator' object")
    applied = apply_returns(RankResult(3, True, {"gen": gone, "x": 1}, ("y",)), namespace)
    assert namespace == {"x": 1}
    assert applied.assigned == ("x",)
    assert applied.missing == ("y",)
    assert applied.not_transferable == ("gen (cannot pickle 'generator' object)",)


def test_a_name_rebound_since_the_launch_is_kept() -> None:
    namespace: dict[str, Any] = {"model": "before", "other": 1}
    launched_with = bindings(namespace, ("model", "other", "new"))
    namespace["model"] = "the user's own"
    applied = apply_returns(RankResult(returned={"model": "trained", "other": 2, "new": 3}), namespace, unless_rebound=launched_with)
    assert namespace == {"model": "the user's own", "other": 2, "new": 3}
    assert applied.kept == ("model",)
    assert applied.returned["model"] == "trained"
