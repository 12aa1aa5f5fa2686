"""check()/gather_facts(): what validation learns from real files, the model directory and the caches."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from recipe_support import xla_runtime_started
from transformers import AutoConfig, AutoModel

from tpu_nb.recipes import DatasetFacts, ModelFacts, ModelSize, NotFound, TrainConfig, check, gather_facts
from tpu_nb.recipes.facts import dataset_facts, model_facts, output_dir_problem


def by_field(config: TrainConfig) -> dict[str, str]:
    return {problem.field: problem.message for problem in check(config)}


@pytest.fixture
def reviews(tmp_path: Path) -> Path:
    path = tmp_path / "reviews.csv"
    rows = ["review,stars,sentiment"] + [f"review number {index},{index / 7:.3f},{'good' if index % 2 else 'bad'}" for index in range(40)]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_the_demo_with_a_local_model_has_no_problems(tiny_bert: Path, tmp_path: Path) -> None:
    config = TrainConfig(model=str(tiny_bert), max_length=32, output_dir=str(tmp_path / "out"))
    assert check(config) == []
    facts = gather_facts(config)
    assert facts.dataset == DatasetFacts(("text", "label"), ("text",), 4000, facts.dataset.labels)  # type: ignore[union-attr]
    assert facts.dataset.labels.examples == ("negative", "positive")  # type: ignore[union-attr]
    built = AutoModel.from_config(AutoConfig.from_pretrained(tiny_bert))  # what the meta-device count must match
    size = ModelSize(sum(parameter.numel() for parameter in built.parameters()), layers=1, hidden=128, heads=4)
    assert facts.model == ModelFacts(64, "max_position_embeddings", True, "bert", size, lora_targets_known=True)
    assert facts.peft_installed
    assert not xla_runtime_started()


def test_a_hub_model_offline_lists_the_models_found_here(tiny_bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(tiny_bert, tmp_path / "my-bert")
    monkeypatch.chdir(tmp_path)
    message = by_field(TrainConfig(model="google-bert/bert-base-uncased"))["model"]
    assert message.startswith(
        '"google-bert/bert-base-uncased" is not on this machine and the Hugging Face Hub cannot be reached (HF_HUB_OFFLINE=1 is set).'
    )
    assert "./my-bert" in message.split("found on this machine: ")[1]


def test_a_hub_dataset_offline(tiny_bert: Path) -> None:
    message = by_field(TrainConfig(model=str(tiny_bert), dataset="stanfordnlp/imdb"))["dataset"]
    assert message.startswith('"stanfordnlp/imdb" is not in the local datasets cache and the Hugging Face Hub cannot be reached')
    assert 'use "demo"' in message


def test_columns_and_labels_of_a_csv_file(tiny_bert: Path, reviews: Path) -> None:
    found = by_field(TrainConfig(model=str(tiny_bert), dataset=str(reviews), label_column="stars", max_length=32))
    assert found["text_column"] == 'the dataset has no column "text"; its columns are: review, stars, sentiment.'
    assert re.match(
        r'"stars" is not categorical: it holds fractional numbers such as 0\.\d+, and text classification needs classes',
        found["label_column"],
    )
    good = TrainConfig(
        model=str(tiny_bert), dataset=str(reviews), text_column="review", label_column="sentiment", max_length=32, per_core_batch_size=4
    )
    assert check(good) == []


def test_too_many_classes_in_a_csv_column(tiny_bert: Path, tmp_path: Path) -> None:
    many = tmp_path / "many.csv"
    many.write_text("text,label\n" + "".join(f"row {index},{index}\n" for index in range(300)))
    facts = dataset_facts(TrainConfig(model=str(tiny_bert), dataset=str(many)))
    assert isinstance(facts, DatasetFacts) and facts.train_rows == 270  # 10% held out for evaluation
    assert (
        "has 270 distinct values (more than 100)"
        in by_field(TrainConfig(model=str(tiny_bert), dataset=str(many), max_length=32))["label_column"]
    )


def test_a_missing_file_and_a_missing_model_directory(tmp_path: Path) -> None:
    found = by_field(TrainConfig(model=str(tmp_path / "nope"), dataset=str(tmp_path / "missing.csv")))
    assert (
        found["dataset"]
        == f'no file "{tmp_path / "missing.csv"}" on this machine; check the path, or use "demo" (built-in sentiment sentences).'
    )
    assert found["model"].startswith(f'no model directory "{tmp_path / "nope"}" on this machine')


def test_a_directory_without_weights_is_not_a_model(tiny_bert: Path, tmp_path: Path) -> None:
    (tmp_path / "config-only").mkdir()
    shutil.copy(tiny_bert / "config.json", tmp_path / "config-only")
    missing = model_facts(TrainConfig(model=str(tmp_path / "config-only")))
    assert isinstance(missing, NotFound) and missing.reason == "unreadable"
    assert "lacks config.json and weights (model.safetensors or pytorch_model.bin)" in missing.detail


def test_max_length_against_the_local_models_positions(tiny_bert: Path) -> None:
    assert by_field(TrainConfig(model=str(tiny_bert), max_length=128))["max_length"] == (
        "128 is above the model's limit of 64 positions (max_position_embeddings); use 64 or less."
    )


def test_a_file_datasets_eval_split_must_be_a_file(tiny_bert: Path, reviews: Path) -> None:
    found = by_field(
        TrainConfig(model=str(tiny_bert), dataset=str(reviews), text_column="review", label_column="sentiment", eval_split="validation")
    )
    assert (
        found["eval_split"]
        == f'cannot load "{reviews}": for a file dataset, eval_split must be another file (or None to hold out eval_fraction).'
    )


def test_output_directory_problems(tmp_path: Path) -> None:
    assert output_dir_problem(str(tmp_path / "new" / "deeper")) is None
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert output_dir_problem(str(blocker / "out")) == f'"{blocker}" is a file, not a directory'
    assert not list(tmp_path.glob("new"))  # checking creates nothing
