"""Telling a local path from a Hub id by its spelling."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpu_nb.recipes.sources import dataset_kind, display_path, file_builder, looks_like_path


@pytest.mark.parametrize(
    "name, kind",
    [
        ("demo", "demo"),
        ("stanfordnlp/imdb", "hub"),
        ("glue", "hub"),
        ("data/train.csv", "file"),
        ("reviews.jsonl", "file"),
        ("./corpus", "file"),
        ("~/data/reviews.parquet", "file"),
        ("sheet.xlsx", "file"),
    ],
)
def test_dataset_kinds(name: str, kind: str) -> None:
    assert dataset_kind(name) == kind


@pytest.mark.parametrize("name", ["Qwen/Qwen2.5-0.5B", "microsoft/phi-1.5", "bert-base-uncased", "EleutherAI/pythia-160m"])
def test_hub_model_ids_with_dots_are_not_paths(name: str) -> None:
    assert not looks_like_path(name)


def test_an_existing_directory_is_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mymodel").mkdir()
    monkeypatch.chdir(tmp_path)
    assert looks_like_path("mymodel")
    assert display_path(tmp_path / "mymodel") == "./mymodel"
    assert display_path(Path("/")) == "/"


def test_file_builders() -> None:
    assert [file_builder(name) for name in ("a.CSV", "a.tsv", "a.jsonl", "a.parquet", "a.txt", "a.xlsx")] == [
        "csv",
        "csv",
        "json",
        "parquet",
        "text",
        None,
    ]
