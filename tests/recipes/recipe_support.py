"""Shared by the recipe and picker tests: a tiny local model, and a check that XLA stayed off in this process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def save_tiny_bert(directory: Path, max_positions: int = 64, seed: int = 0) -> Path:
    """Save a randomly initialised 1-layer BERT (hidden 128) and its tokenizer; the task head comes from prepare().

    Without dropout, so that it learns the demo task within about a hundred steps from scratch.
    """
    import torch
    from transformers import BertConfig, BertModel

    fast = _demo_tokenizer(max_positions)
    fast.save_pretrained(directory)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(fast),
        hidden_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=256,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=max_positions,
        pad_token_id=fast.pad_token_id,
    )
    BertModel(config).save_pretrained(directory)
    return directory


def save_tiny_llama(directory: Path, max_positions: int = 64, seed: int = 0) -> Path:
    """Save a randomly initialised 2-layer Llama (hidden 64) with the same word-level tokenizer: a causal LM."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    fast = _demo_tokenizer(max_positions)
    fast.save_pretrained(directory)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=max_positions,
        pad_token_id=fast.pad_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(directory)
    return directory


def _demo_tokenizer(max_positions: int) -> Any:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from tpu_nb.recipes.demo_data import demo_examples

    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(
        (text for text, _ in demo_examples(2000, seed=99)), trainers.WordLevelTrainer(special_tokens=list(SPECIAL_TOKENS))
    )
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=max_positions,
    )


def xla_runtime_started() -> bool:
    """Whether this (test) process started the XLA runtime: after that no launch could start workers."""
    import torch_xla

    return bool(torch_xla._XLAC._xla_runtime_is_initialized())
