"""The picker's form as plain values: defaults per task, suggestions, and the TrainConfig it stands for."""

from __future__ import annotations

from pathlib import Path

from tpu_nb.picking.form import (
    SUGGESTED_MODELS,
    config_from_form,
    data_files_in,
    default_config,
    form_values,
    guess_label_column,
    guess_text_column,
    model_options,
    save_upload,
)
from tpu_nb.recipes import TrainConfig


def test_a_model_on_this_machine_comes_first_so_the_default_works_offline() -> None:
    assert default_config("text-classification", ["./tiny-bert"]).model == "./tiny-bert"
    assert default_config("causal-lm", []).model == "openai-community/gpt2"
    assert model_options("masked-lm", ["./a", "FacebookAI/roberta-base"]) == (
        "./a",
        "FacebookAI/roberta-base",
        "distilbert/distilroberta-base",
        "google-bert/bert-base-uncased",
    )


def test_defaults_differ_per_task() -> None:
    classify, causal = default_config("text-classification"), default_config("causal-lm")
    assert (classify.max_length, classify.warmup) == (128, 0.1)
    assert (causal.max_length, causal.per_core_batch_size, causal.task) == (256, 8, "causal-lm")
    assert all(SUGGESTED_MODELS[task] for task in ("text-classification", "masked-lm", "causal-lm"))


def test_widget_values_round_trip_and_blank_optionals_mean_none() -> None:
    config = TrainConfig(model="m", max_steps=100, eval_split="validation", dataset_config="sst2")
    values = form_values(config)
    assert config_from_form(values) == config
    blank = form_values(TrainConfig(model="m"))
    assert (blank["max_steps"], blank["eval_split"], blank["dataset_config"]) == (0, "", "")
    values.update(max_steps=0, eval_split="  ", model=" ./tiny-bert ")
    assert config_from_form(values) == config.replace(max_steps=None, eval_split=None, model="./tiny-bert")


def test_column_guesses() -> None:
    assert guess_text_column(("id", "Sentence", "label"), ("Sentence",)) == "Sentence"
    assert guess_text_column(("id", "body"), ("body",)) == "body"
    assert guess_label_column(("review", "Sentiment", "id"), ("review",)) == "Sentiment"
    assert guess_label_column(("review", "stars"), ("review",)) == "stars"
    assert guess_text_column(("n",), ()) is None


def test_uploads_keep_only_a_safe_file_name(tmp_path: Path) -> None:
    path = save_upload("../../etc/my reviews (1).csv", b"text,label\n", tmp_path / "uploads")
    assert path == tmp_path / "uploads" / "my_reviews__1_.csv"
    assert path.read_bytes() == b"text,label\n"
    assert save_upload(".hidden", b"", tmp_path).name == "hidden"


def test_data_files_next_to_the_notebook(notebook_dir: Path) -> None:
    (notebook_dir / "notes.md").write_text("")
    assert data_files_in(notebook_dir) == ("./reviews.csv",)
    assert data_files_in(notebook_dir / "absent") == ()
