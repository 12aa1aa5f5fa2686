"""validate(): every problem at once, each message saying what to do (pure: facts are given)."""

from __future__ import annotations

import pytest

from tpu_nb.recipes import ConfigProblem, DatasetFacts, Facts, LabelFacts, ModelFacts, NotFound, TrainConfig, validate

CONFIG = TrainConfig(model="./models/tiny", dataset="reviews.csv", text_column="text", label_column="label", max_length=128)
REVIEWS = DatasetFacts(columns=("text", "label", "stars"), text_columns=("text",), train_rows=1000, labels=LabelFacts(2, ("neg", "pos")))
BERT = ModelFacts(position_limit=512)
GOOD = Facts(dataset=REVIEWS, model=BERT)


def messages(config: TrainConfig, facts: Facts | None = None) -> dict[str, str]:
    problems = validate(config, facts)
    assert all(isinstance(problem, ConfigProblem) for problem in problems)
    return {problem.field: problem.message for problem in problems}


def test_a_good_configuration_has_no_problems() -> None:
    assert validate(CONFIG, GOOD) == []
    assert validate(TrainConfig(model="m")) == []


def test_every_problem_is_reported_at_once() -> None:
    config = CONFIG.replace(task="regression", per_core_batch_size=0, learning_rate=0.0, text_column="body", max_length=1024)
    facts = Facts(dataset=REVIEWS, model=BERT, output_dir_problem='"/proc" is not writable (Permission denied)')
    found = messages(config, facts)
    assert list(found) == ["task", "per_core_batch_size", "learning_rate", "text_column", "max_length", "output_dir"]


def test_unknown_task_lists_the_known_ones() -> None:
    assert messages(CONFIG.replace(task="summarization"))["task"] == (
        'unknown task "summarization"; use one of: text-classification, masked-lm, causal-lm.'
    )


def test_missing_columns_list_the_available_ones() -> None:
    found = messages(CONFIG.replace(text_column="body", label_column="sentiment"), GOOD)
    assert found["text_column"] == 'the dataset has no column "body"; its columns are: text, label, stars.'
    assert found["label_column"] == 'the dataset has no column "sentiment"; its columns are: text, label, stars.'


def test_language_modelling_needs_no_label_column() -> None:
    assert validate(CONFIG.replace(task="causal-lm", label_column="nope"), GOOD) == []


def test_a_text_column_that_holds_no_text() -> None:
    assert messages(CONFIG.replace(text_column="stars"), GOOD)["text_column"] == (
        '"stars" does not hold text; the columns holding text are: text.'
    )


def test_fractional_labels_are_not_categorical() -> None:
    facts = Facts(dataset=DatasetFacts(("text", "score"), ("text",), 1000, LabelFacts(812, ("0.37", "0.5"), "0.37")))
    message = messages(CONFIG.replace(label_column="score"), facts)["label_column"]
    assert message.startswith('"score" is not categorical: it holds fractional numbers such as 0.37')
    assert "bin the numbers into classes" in message


def test_too_many_distinct_labels_are_not_categorical() -> None:
    facts = Facts(dataset=DatasetFacts(("text", "id"), ("text",), 5000, LabelFacts(4990, ("1", "2"))))
    message = messages(CONFIG.replace(label_column="id"), facts)["label_column"]
    assert '"id" is not categorical: it has 4990 distinct values (more than 100)' in message
    assert "Choose the column that holds each example's class." in message


def test_a_single_class_cannot_be_learned() -> None:
    facts = Facts(dataset=DatasetFacts(("text", "label"), ("text",), 50, LabelFacts(1, ("pos",))))
    assert "it has 1 distinct value (pos); a classifier needs at least 2 classes" in messages(CONFIG, facts)["label_column"]


def test_max_length_above_the_models_limit_names_both_numbers() -> None:
    assert messages(CONFIG.replace(max_length=1024), GOOD)["max_length"] == (
        "1024 is above the model's limit of 512 positions (max_position_embeddings); use 512 or less."
    )


@pytest.mark.parametrize("size", [0, -4])
def test_batch_size_must_be_positive(size: int) -> None:
    assert messages(CONFIG.replace(per_core_batch_size=size))["per_core_batch_size"] == (
        f"must be a positive number of examples per TPU core, got {size}."
    )


def test_fewer_rows_than_one_global_batch() -> None:
    facts = Facts(dataset=DatasetFacts(("text", "label"), ("text",), 100, LabelFacts(2, ("a", "b"))), devices=8)
    assert messages(CONFIG.replace(per_core_batch_size=16), facts)["per_core_batch_size"] == (
        "the training split has 100 rows, fewer than one global batch of 128 (16 per core x 8 cores); lower per_core_batch_size or use more data."
    )


def test_output_directory_not_writable() -> None:
    facts = Facts(output_dir_problem='"/srv" is not writable (Permission denied)')
    assert messages(CONFIG.replace(output_dir="/srv/run"), facts)["output_dir"] == (
        'cannot write to "/srv/run": "/srv" is not writable (Permission denied). Choose a directory you can write to, e.g. "./tpu_nb_output".'
    )


def test_model_not_found_offline_says_the_hub_is_unreachable_and_what_to_use() -> None:
    facts = Facts(model=NotFound("offline", "HF_HUB_OFFLINE=1 is set"), local_models=("/opt/minilm", "./tpu_nb_output"))
    message = messages(CONFIG.replace(model="bert-base-uncased"), facts)["model"]
    assert message.startswith(
        '"bert-base-uncased" is not on this machine and the Hugging Face Hub cannot be reached (HF_HUB_OFFLINE=1 is set).'
    )
    assert "give its local directory (with config.json and weights)" in message
    assert message.endswith("or use a model found on this machine: /opt/minilm, ./tpu_nb_output.")


def test_model_not_found_offline_with_no_local_models() -> None:
    facts = Facts(model=NotFound("offline", "no connection to huggingface.co: Name or service not known"))
    assert messages(CONFIG.replace(model="gpt2"), facts)["model"].endswith("found on this machine: none found.")


def test_dataset_not_found_offline_points_at_local_files_and_the_demo() -> None:
    facts = Facts(dataset=NotFound("offline", "HF_HUB_OFFLINE=1 is set"))
    message = messages(CONFIG.replace(dataset="stanfordnlp/imdb"), facts)["dataset"]
    assert message.startswith(
        '"stanfordnlp/imdb" is not in the local datasets cache and the Hugging Face Hub cannot be reached (HF_HUB_OFFLINE=1 is set).'
    )
    assert "Give a local data file instead (.csv, .json, .jsonl, .parquet, .tsv, .txt)" in message
    assert 'or use "demo" (built-in sentiment sentences)' in message


def test_missing_paths() -> None:
    facts = Facts(
        dataset=NotFound("no_such_path", "/data/reviews.csv"), model=NotFound("no_such_path", "/models/tiny"), local_models=("/opt/minilm",)
    )
    found = messages(CONFIG, facts)
    assert found["dataset"] == 'no file "/data/reviews.csv" on this machine; check the path, or use "demo" (built-in sentiment sentences).'
    assert found["model"] == (
        'no model directory "/models/tiny" on this machine; give a directory with config.json and weights, '
        "or one of the models found here: /opt/minilm."
    )


def test_not_on_the_hub() -> None:
    facts = Facts(dataset=NotFound("not_on_hub"), model=NotFound("not_on_hub"))
    found = messages(CONFIG.replace(model="bert-base-uncasd", dataset="imbd"), facts)
    assert found["model"].startswith('no model "bert-base-uncasd" on the Hugging Face Hub; check the spelling')
    assert found["dataset"].startswith('no dataset "imbd" on the Hugging Face Hub; check the spelling')


def test_a_missing_split_blames_the_split_field() -> None:
    facts = Facts(dataset=NotFound("unreadable", 'it has no split "validation"; its splits are: train, test.', field="eval_split"))
    assert messages(CONFIG.replace(dataset="imdb", eval_split="validation"), facts)["eval_split"] == (
        'cannot load "imdb": it has no split "validation"; its splits are: train, test.'
    )


def test_unsupported_file_formats_say_which_to_use() -> None:
    assert messages(CONFIG.replace(dataset="reviews.xlsx"))["dataset"] == (
        'cannot read ".xlsx" files; save the data as one of .csv, .json, .jsonl, .parquet, .tsv, .txt (.txt: one text per line) and give that file.'
    )


def test_masked_lm_needs_a_mask_token() -> None:
    facts = Facts(model=ModelFacts(1024, "n_positions", has_mask_token=False))
    assert messages(CONFIG.replace(task="masked-lm", model="gpt2"), facts)["model"] == (
        '"gpt2" has no mask token, so it cannot do masked-lm; use causal-lm with it, or a masked model such as BERT or RoBERTa.'
    )


@pytest.mark.parametrize(
    "changes, field, message",
    [
        ({"model": " "}, "model", "choose a model: a Hugging Face Hub id"),
        ({"dataset": ""}, "dataset", 'choose a dataset: a Hub id, a local data file, or "demo" (built in).'),
        ({"max_length": 0}, "max_length", "must be a positive number of tokens per example, got 0."),
        ({"epochs": 0.0}, "epochs", "must be a positive number of passes over the training data (or set max_steps), got 0.0."),
        ({"max_steps": 0}, "max_steps", "must be a positive number of training steps (or None to train by epochs), got 0."),
        ({"warmup": -1.0}, "warmup", "must be 0 or more"),
        ({"weight_decay": -0.1}, "weight_decay", "must be 0 or more, e.g. 0.01, got -0.1."),
        ({"task": "masked-lm", "mlm_probability": 1.5}, "mlm_probability", "must be between 0 and 1"),
        ({"eval_fraction": 0.0}, "eval_fraction", "must be between 0 and 1"),
        ({"eval_steps": 0}, "eval_steps", "must be positive (or None), got 0."),
        ({"logging_steps": 0}, "logging_steps", "must be a positive number of steps between loss reports, got 0."),
        ({"label_column": ""}, "label_column", "name the column that holds each example's class."),
        ({"strategy": "zero3"}, "strategy", 'unknown strategy "zero3"; use one of: data-parallel, fsdp.'),
        ({"lora_rank": 8}, "lora_rank", "LoRA is offered for causal-lm here; leave lora_rank at None for text-classification."),
        ({"task": "causal-lm", "lora_rank": 0}, "lora_rank", "must be a positive rank, e.g. 8 or 16 (None trains every weight), got 0."),
    ],
)
def test_settings(changes: dict[str, object], field: str, message: str) -> None:
    assert message in messages(CONFIG.replace(**changes))[field]


def test_a_problem_reads_as_field_and_message() -> None:
    assert str(ConfigProblem("max_length", "too long.")) == "max_length: too long."


def test_lora_needs_peft_installed() -> None:
    config = CONFIG.replace(task="causal-lm", lora_rank=8)
    assert messages(config, Facts(peft_installed=False))["lora_rank"] == (
        "LoRA needs peft: pip install 'tpu_nb[lora]' (or pip install peft), then check again."
    )
    assert "lora_rank" not in messages(config, Facts(peft_installed=True))


def test_lora_on_an_architecture_peft_cannot_adapt_by_itself() -> None:
    facts = Facts(dataset=REVIEWS, model=ModelFacts(position_limit=512, model_type="exotic", lora_targets_known=False))
    assert messages(CONFIG.replace(task="causal-lm", lora_rank=8), facts)["lora_rank"].startswith(
        'peft does not know which layers of a "exotic" model to adapt; train every weight (lora_rank None)'
    )
