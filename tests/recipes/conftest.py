"""Recipe tests run offline (nothing can come from the Hub here), with a tiny BERT saved like a local model."""

from __future__ import annotations

from pathlib import Path

import pytest
from recipe_support import save_tiny_bert, save_tiny_llama


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local model directory: 1-layer BERT (random weights) with a word-level tokenizer of the demo words."""
    return save_tiny_bert(tmp_path_factory.mktemp("models") / "tiny-bert")


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local causal LM directory: 2-layer Llama (random weights) with the same tokenizer."""
    return save_tiny_llama(tmp_path_factory.mktemp("models") / "tiny-llama")
