"""Loading tokenizer and model per task, on the CPU, and the model's position limit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from recipe_support import xla_runtime_started
from transformers import AutoTokenizer, BertConfig, GPT2Config, GPT2LMHeadModel, RobertaConfig

from tpu_nb.recipes import TrainConfig
from tpu_nb.recipes.models import hub_options, load_model, load_tokenizer, position_limit


def test_position_limits() -> None:
    assert position_limit(BertConfig(max_position_embeddings=512)) == (512, "max_position_embeddings")
    assert position_limit(RobertaConfig(max_position_embeddings=514, pad_token_id=1)) == (
        512,
        "max_position_embeddings 514 minus 2 for its position offset",
    )
    assert position_limit(GPT2Config(n_positions=1024))[0] == 1024


def test_cache_only_for_hub_ids_when_the_hub_is_unreachable(tiny_bert: Path) -> None:
    assert hub_options(str(tiny_bert)) == {}
    assert hub_options("google-bert/bert-base-uncased") == {"local_files_only": True}  # HF_HUB_OFFLINE=1 in these tests


def test_a_classifier_gets_the_labels_and_stays_on_the_cpu(tiny_bert: Path) -> None:
    config = TrainConfig(model=str(tiny_bert))
    model = load_model(config, load_tokenizer(config), ("negative", "neutral", "positive"))
    assert model.config.num_labels == 3
    assert model.config.id2label == {0: "negative", 1: "neutral", 2: "positive"}
    assert model.config.label2id == {"negative": 0, "neutral": 1, "positive": 2}
    assert {parameter.device.type for parameter in model.parameters()} == {"cpu"}
    assert {parameter.dtype for parameter in model.parameters()} == {torch.float32}
    assert not xla_runtime_started()


def test_masked_lm_head(tiny_bert: Path) -> None:
    config = TrainConfig(model=str(tiny_bert), task="masked-lm")
    assert type(load_model(config, load_tokenizer(config))).__name__ == "BertForMaskedLM"


@pytest.fixture
def tiny_gpt2(tiny_bert: Path, tmp_path: Path) -> Path:
    """A GPT-2 style model: its tokenizer has an end-of-text token but no pad token."""
    directory = tmp_path / "tiny-gpt2"
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    tokenizer.pad_token = None
    tokenizer.eos_token = "[SEP]"
    tokenizer.save_pretrained(directory)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=1, n_head=2)).save_pretrained(directory)
    return directory


def test_gpt_style_models_pad_with_their_end_token(tiny_gpt2: Path) -> None:
    config = TrainConfig(model=str(tiny_gpt2))
    tokenizer = load_tokenizer(config)
    assert tokenizer.pad_token == "[SEP]"
    classifier = load_model(config, tokenizer, ("a", "b"))
    assert classifier.config.pad_token_id == tokenizer.pad_token_id  # GPT-2 finds each row's last token with it
    assert type(load_model(config.replace(task="causal-lm"), tokenizer)).__name__ == "GPT2LMHeadModel"


def test_a_new_head_is_seeded_without_touching_the_notebooks_random_state(tiny_bert: Path) -> None:
    config = TrainConfig(model=str(tiny_bert))
    tokenizer = load_tokenizer(config)
    state = torch.random.get_rng_state()
    first, again = (load_model(config, tokenizer, ("a", "b")).state_dict()["classifier.weight"] for _ in range(2))
    other = load_model(config.replace(seed=1), tokenizer, ("a", "b")).state_dict()["classifier.weight"]
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert torch.equal(torch.random.get_rng_state(), state)
