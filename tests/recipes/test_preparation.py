"""prepare(): validation first, then tokenizer, model and static-shape data, all without touching XLA."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch_xla  # noqa: F401 - imported, as in a TPU notebook: prepare() must still leave the runtime off
from recipe_support import xla_runtime_started

from tpu_nb.recipes import FineTuning, InvalidConfig, NotInWorker, TrainConfig, prepare
from tpu_nb.recipes.preparation import batch_problems


@pytest.fixture(scope="module")
def fine_tuning(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> FineTuning:
    output = tmp_path_factory.mktemp("prepared") / "out"
    return prepare(TrainConfig(model=str(tiny_bert), max_length=24, max_train_samples=200, max_eval_samples=64, output_dir=str(output)))


def test_prepare_leaves_the_xla_runtime_off(fine_tuning: FineTuning) -> None:
    assert not xla_runtime_started()


def test_classification_data_has_one_shape(fine_tuning: FineTuning) -> None:
    assert fine_tuning.labels == ("negative", "positive")
    assert fine_tuning.model.config.id2label == {0: "negative", 1: "positive"}
    assert set(fine_tuning.train_dataset.column_names) == {"input_ids", "attention_mask", "labels"}
    assert {len(ids) for ids in fine_tuning.train_dataset["input_ids"]} == {24}
    assert (len(fine_tuning.train_dataset), len(fine_tuning.eval_dataset)) == (200, 64)
    assert repr(fine_tuning).endswith("on demo: 200 training and 64 evaluation examples of 24 tokens, 2 classes (negative, positive))")


def test_training_in_the_notebook_itself_is_refused(fine_tuning: FineTuning) -> None:
    with pytest.raises(NotInWorker, match=r"call it as tpu_nb.launch\(fine_tuning.train\) or inside a %%tpu_train cell"):
        fine_tuning.train()
    assert not xla_runtime_started()


def test_loading_the_trained_model_before_training(fine_tuning: FineTuning) -> None:
    with pytest.raises(FileNotFoundError, match="no trained model in .* yet: train first, with tpu_nb.launch"):
        fine_tuning.load_trained()


def test_every_problem_is_raised_together(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfig) as raised:
        prepare(TrainConfig(model=str(tmp_path / "missing-model"), per_core_batch_size=0, text_column="body"))
    assert [problem.field for problem in raised.value.problems] == ["per_core_batch_size", "text_column", "model"]
    text = str(raised.value)
    assert text.startswith("the configuration has problems:\n- per_core_batch_size: must be a positive number")
    assert f'- model: no model directory "{tmp_path / "missing-model"}" on this machine' in text


def test_evaluation_labels_must_be_known_from_training(tiny_bert: Path, tmp_path: Path) -> None:
    (tmp_path / "train.csv").write_text(
        "text,label\n" + "".join(f"the plot was great,{'a' if index % 2 else 'b'}\n" for index in range(40))
    )
    (tmp_path / "eval.csv").write_text("text,label\n" + "the plot was dull,c\n" * 20)
    config = TrainConfig(
        model=str(tiny_bert),
        dataset=str(tmp_path / "train.csv"),
        eval_split=str(tmp_path / "eval.csv"),
        max_length=16,
        per_core_batch_size=4,
    )
    with pytest.raises(InvalidConfig, match="eval_split: evaluation has labels the training rows never have: c;"):
        prepare(config)


def test_splits_smaller_than_one_global_batch() -> None:
    config = TrainConfig(model="m", task="causal-lm", per_core_batch_size=8, max_length=64)
    problems = batch_problems(config, train=[0] * 20, evaluation=[0] * 3, devices=4)  # type: ignore[arg-type]
    assert [str(problem) for problem in problems] == [
        (
            "per_core_batch_size: training has 20 blocks of 64 tokens, fewer than one global batch of 32 (8 per core x 4 cores); "
            "lower per_core_batch_size or max_length, or use more data."
        ),
        (
            "eval_fraction: evaluation has 3 blocks of 64 tokens, fewer than one global batch of 32 (8 per core x 4 cores); "
            "evaluate on more rows or lower per_core_batch_size."
        ),
    ]
