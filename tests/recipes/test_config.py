"""TrainConfig: defaults, JSON round trip, and errors that name what is wrong."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from tpu_nb.recipes import TASKS, ConfigError, TrainConfig

EVERY_FIELD_CHANGED = TrainConfig(
    model="./models/tiny",
    task="masked-lm",
    dataset="data/reviews.csv",
    dataset_config="sst2",
    train_split="train[:50%]",
    eval_split="data/eval.csv",
    eval_fraction=0.2,
    text_column="review",
    label_column="stars",
    max_length=64,
    per_core_batch_size=8,
    epochs=2.5,
    max_steps=300,
    learning_rate=3e-4,
    warmup=20,
    weight_decay=0.0,
    bf16=True,
    mlm_probability=0.2,
    strategy="fsdp",
    lora_rank=16,
    eval_steps=50,
    save_steps=100,
    logging_steps=5,
    max_train_samples=1000,
    max_eval_samples=200,
    output_dir="/tmp/out",
    seed=7,
)


def test_the_example_changes_every_field() -> None:
    defaults = TrainConfig(model=EVERY_FIELD_CHANGED.model)
    assert [field.name for field in fields(TrainConfig) if getattr(defaults, field.name) == getattr(EVERY_FIELD_CHANGED, field.name)] == [
        "model"
    ]


def test_defaults_classify_the_demo_dataset() -> None:
    config = TrainConfig(model="distilbert/distilbert-base-uncased")
    assert (config.task, config.dataset, config.text_column, config.label_column) == ("text-classification", "demo", "text", "label")
    assert config.max_steps is None and config.eval_split is None
    assert TASKS == ("text-classification", "masked-lm", "causal-lm")


def test_json_round_trip_keeps_every_field_and_type() -> None:
    text = EVERY_FIELD_CHANGED.to_json()
    assert TrainConfig.from_json(text) == EVERY_FIELD_CHANGED
    data = json.loads(text)
    assert data["max_steps"] == 300 and data["bf16"] is True and data["eval_split"] == "data/eval.csv"


def test_round_trip_of_none_values() -> None:
    config = TrainConfig(model="m")
    assert TrainConfig.from_json(config.to_json()) == config


def test_unknown_keys_are_named_with_the_known_ones() -> None:
    data = {"model": "m", "lr": 0.1, "batch": 8}
    with pytest.raises(ConfigError) as raised:
        TrainConfig.from_json(json.dumps(data))
    message = str(raised.value)
    assert 'unknown keys in the configuration: "batch", "lr"' in message
    assert "learning_rate" in message and "per_core_batch_size" in message


def test_a_missing_model_is_named() -> None:
    with pytest.raises(ConfigError, match='lacks required keys: "model"'):
        TrainConfig.from_json('{"task": "causal-lm"}')


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("max_length", "128", 'max_length must be int, not "128"'),
        ("bf16", 1, "bf16 must be bool, not 1"),
        ("max_steps", 2.5, "max_steps must be int or null, not 2.5"),
        ("learning_rate", True, "learning_rate must be float, not true"),
    ],
)
def test_wrong_types_are_named(key: str, value: object, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        TrainConfig.from_json(json.dumps({"model": "m", key: value}))


def test_integers_are_accepted_for_float_fields() -> None:
    assert TrainConfig.from_json('{"model": "m", "epochs": 3, "warmup": 100}').epochs == 3


@pytest.mark.parametrize("text, message", [("[1, 2]", "must be a JSON object, not list"), ("{model:", "not valid JSON")])
def test_text_that_is_not_a_json_object(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TrainConfig.from_json(text)


def test_replace_returns_a_changed_copy() -> None:
    config = TrainConfig(model="m")
    assert config.replace(seed=1).seed == 1 and config.seed == 42
    with pytest.raises(AttributeError):
        config.seed = 3  # type: ignore[misc]
