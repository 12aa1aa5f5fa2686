"""A %%tpu_train --pod cell checked against the recorded cells before anything starts."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from tpu_nb.kernel.pod.cell_checks import names_from_unrecorded_cells
from tpu_nb.wire.run_directory import Cell

NOTEBOOK = {"model": object(), "tokenizer": object(), "torch": object(), "helper": object(), "_private": 1}


def test_names_only_the_notebook_defines_are_found() -> None:
    prepared = [
        Cell(
            "In [1]",
            "%%tpu_prepare",
            "import torch\nfrom transformers import AutoTokenizer\ntokenizer = AutoTokenizer.from_pretrained('x')",
        )
    ]
    train = "model.to(device)\nfor batch in tokenizer(['a']):\n    report(step=rank, loss=torch.ones(1))\nprint(len, _private)"
    assert names_from_unrecorded_cells(prepared, Cell("In [2]", "", train), NOTEBOOK) == {"In [2]": ["model"]}


def test_anything_a_cell_binds_counts_as_defined() -> None:
    train = (
        "def step(model, *, helper=None):\n    return model, helper\n"
        "model = step(1)\n[tokenizer for tokenizer in range(2)]\n"
        "try:\n    pass\nexcept ValueError as torch:\n    pass"
    )
    assert names_from_unrecorded_cells([], Cell("In [2]", "", train), NOTEBOOK) == {}


def test_a_recorded_cell_that_uses_an_unrecorded_name_is_named_too() -> None:
    prepared = [Cell("In [3]", "%%tpu_prepare", "steps = helper + 1"), Cell("In [4]", "%%tpu_prepare", "helper = 2")]
    assert names_from_unrecorded_cells(prepared, Cell("In [5]", "", "steps"), NOTEBOOK) == {"In [3]": ["helper"]}


def test_a_pod_cell_using_an_unrecorded_cells_model_is_refused(ip: InteractiveShell) -> None:
    with capture_output():
        ip.run_cell("import torch\nmodel = torch.nn.Linear(2, 1)")
        result = ip.run_cell("%%tpu_train --pod my-slice --backend export\nmodel.to(device)")
    assert isinstance(result.error_in_exec, UsageError)
    message = str(result.error_in_exec)
    assert message.startswith("tpu_nb did not start the pod run:\n- %%tpu_train --pod: In [")
    assert "uses `model`, which only cells not marked %%tpu_prepare defined" in message


def test_a_pod_cell_with_a_syntax_error_starts_nothing(ip: InteractiveShell) -> None:
    with capture_output():
        result = ip.run_cell("%%tpu_train --pod my-slice --backend export\nfor x in range(3)\n    pass")
    assert isinstance(result.error_in_exec, UsageError) and "syntax error (line 2)" in str(result.error_in_exec)
