"""code_for(): one ready cell that prepares, trains on every core and loads the trained model."""

from __future__ import annotations

import ast
import math
from pathlib import Path

from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from recipe_support import xla_runtime_started

from tpu_nb.recipes import TrainConfig, code_for


def config_in(code: str) -> TrainConfig:
    """The TrainConfig the cell builds, evaluated without running anything else."""
    tree = ast.parse(code)
    assignment = next(node for node in tree.body if isinstance(node, ast.Assign) and node.targets[0].id == "config")  # type: ignore[attr-defined]
    return eval(compile(ast.Expression(assignment.value), "<cell>", "eval"), {"TrainConfig": TrainConfig})  # type: ignore[no-any-return]


def test_the_cell_writes_out_the_settings_that_differ_from_the_defaults() -> None:
    config = TrainConfig(model="./models/tiny", dataset='data/"quoted".csv', max_steps=200, learning_rate=3e-4, eval_split=None, bf16=True)
    code = code_for(config)
    assert config_in(code) == config
    assert "    max_steps=200,\n    learning_rate=0.0003,\n" in code and "bf16=True" in code
    assert "seed=" not in code and "eval_split" not in code  # defaults are left out
    assert code.splitlines()[0] == '# Fine-tune ./models/tiny (text-classification) on data/"quoted".csv with tpu_nb.'


def test_the_cell_prepares_in_the_notebook_and_trains_in_the_workers() -> None:
    lines = code_for(TrainConfig(model="m")).splitlines()
    assert lines.index("fine_tuning = prepare(config)") < lines.index("result = tpu_nb.launch(fine_tuning.train)")
    assert "model, tokenizer = fine_tuning.load_trained(), fine_tuning.tokenizer" in lines
    assert any('pipeline("text-classification", model=model, tokenizer=tokenizer)' in line for line in lines)
    assert not any("pipeline" in line for line in code_for(TrainConfig(model="m", task="causal-lm")).splitlines())


def test_an_fsdp_cell_launches_one_spmd_worker() -> None:
    config = TrainConfig(model="m", task="causal-lm", strategy="fsdp", lora_rank=8)
    code = code_for(config)
    assert config_in(code) == config
    assert "result = tpu_nb.launch(fine_tuning.train, spmd=True)" in code.splitlines()
    assert "# FSDP: one SPMD worker drives every core; the model's weights are split over them." in code


def test_the_masked_lm_cell_runs_and_reports_perplexity(ip: InteractiveShell, tiny_bert: Path, tmp_path: Path) -> None:
    config = TrainConfig(
        model=str(tiny_bert), task="masked-lm", max_length=32, per_core_batch_size=16, max_steps=6, learning_rate=1e-3,
        max_train_samples=400, max_eval_samples=100, output_dir=str(tmp_path / "mlm"),
    )  # fmt: skip
    with capture_output() as captured:
        cell = ip.run_cell(code_for(config))
    assert cell.success, captured.stdout + captured.stderr
    result = ip.user_ns["result"]
    assert result.steps == 6
    assert math.isclose(result.metrics["perplexity"], math.exp(result.metrics["loss"]), rel_tol=1e-6)
    assert "trained 6 steps in" in captured.stdout and "perplexity" in captured.stdout
    assert type(ip.user_ns["model"]).__name__ == "BertForMaskedLM"
    assert ip.user_ns["model"] is ip.user_ns["fine_tuning"].model
    assert not xla_runtime_started()
