"""Loading splits and tokenizing to static shapes (padding to max_length, packing into blocks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from tpu_nb.recipes import TrainConfig
from tpu_nb.recipes.data import (
    DataSourceError,
    group_texts,
    load_splits,
    tokenize_for_classification,
    tokenize_for_language_modelling,
    usable_rows,
)


def test_the_demo_uses_its_validation_split() -> None:
    splits = load_splits(TrainConfig(model="m"))
    assert (len(splits.train), len(splits.eval)) == (4000, 500)


def test_limits_take_a_shuffled_sample() -> None:
    splits = load_splits(TrainConfig(model="m", max_train_samples=100, max_eval_samples=40))
    assert (len(splits.train), len(splits.eval)) == (100, 40)
    assert list(splits.train["text"]) != list(load_splits(TrainConfig(model="m")).train["text"][:100])
    assert 0 < sum(splits.train["label"]) < 100


def test_a_file_without_validation_split_holds_out_a_fraction(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"text": f"row {index}", "label": index % 3}) + "\n" for index in range(50)))
    splits = load_splits(TrainConfig(model="m", dataset=str(path), eval_fraction=0.2))
    assert (len(splits.train), len(splits.eval)) == (40, 10)
    assert not set(splits.train["text"]) & set(splits.eval["text"])


def test_an_eval_file_and_a_tsv(tmp_path: Path) -> None:
    (tmp_path / "train.tsv").write_text("text\tlabel\n" + "".join(f"row {index}\t{index % 2}\n" for index in range(12)))
    (tmp_path / "eval.tsv").write_text("text\tlabel\nheld out\t1\n")
    splits = load_splits(TrainConfig(model="m", dataset=str(tmp_path / "train.tsv"), eval_split=str(tmp_path / "eval.tsv")))
    assert (len(splits.train), splits.eval["text"]) == (12, ["held out"])


def test_a_missing_split_names_the_existing_ones() -> None:
    with pytest.raises(DataSourceError) as raised:
        load_splits(TrainConfig(model="m", train_split="training"))
    missing = raised.value.not_found
    assert (missing.field, missing.detail) == ("train_split", 'it has no split "training"; its splits are: train, validation.')


def test_unlabelled_and_empty_rows_are_dropped(tmp_path: Path) -> None:
    path = tmp_path / "gaps.csv"
    path.write_text("text,label\ngood,1\n,0\nbad,\nfine,1\n")
    rows = load_splits(TrainConfig(model="m", dataset=str(path), eval_split=str(path))).eval
    assert usable_rows(rows, TrainConfig(model="m"))["text"] == ["good", "fine"]
    assert usable_rows(rows, TrainConfig(model="m", task="causal-lm"))["text"] == ["good", "bad", "fine"]


def test_classification_pads_every_example_to_max_length(tiny_bert: Path, tmp_path: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    path = tmp_path / "words.csv"
    path.write_text("text,label\nthe plot was great,pos\n" + "the acting was dull and the story was weak and the pacing was tedious,neg\n")
    config = TrainConfig(model=str(tiny_bert), dataset=str(path), max_length=10)
    rows = load_splits(config.replace(eval_split=str(path))).eval
    encoded = tokenize_for_classification(rows, tokenizer, config, {"neg": 0, "pos": 1})
    assert [len(ids) for ids in encoded["input_ids"]] == [10, 10]
    assert encoded["labels"] == [1, 0]
    assert encoded["attention_mask"][0] == [1] * 6 + [0] * 4  # [CLS] 4 words [SEP], then padding
    assert encoded["input_ids"][1][-1] == tokenizer.sep_token_id  # cut, but still ends like a sentence


def test_language_modelling_packs_texts_into_full_blocks(tiny_bert: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    config = TrainConfig(model=str(tiny_bert), task="causal-lm", max_length=16, max_eval_samples=40)
    rows = load_splits(config).eval
    blocks = tokenize_for_language_modelling(rows, tokenizer, config)
    assert {len(ids) for ids in blocks["input_ids"]} == {16}
    assert blocks["labels"] == blocks["input_ids"]
    masked = tokenize_for_language_modelling(rows, tokenizer, config.replace(task="masked-lm"))
    assert "labels" not in masked.column_names and "special_tokens_mask" in masked.column_names


def test_group_texts_drops_the_remainder() -> None:
    packed = group_texts(
        {"input_ids": [[1, 2, 3], [4, 5], [6, 7, 8, 9]], "attention_mask": [[1, 1, 1], [1, 1], [1, 1, 1, 1]]},
        block_size=4,
        with_labels=True,
    )
    assert packed == {
        "input_ids": [[1, 2, 3, 4], [5, 6, 7, 8]],
        "attention_mask": [[1] * 4, [1] * 4],
        "labels": [[1, 2, 3, 4], [5, 6, 7, 8]],
    }
