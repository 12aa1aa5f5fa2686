"""The decoder families people fine-tune, each a small config, take an SFT step with LoRA under TRL's defaults in a
worker per device: Llama, Gemma 2 and 3, Qwen 2.5 (Qwen2) and 3, Mistral, Phi-3, and Mixtral (mixture of experts,
whose default experts implementation fails on XLA: tpu_nb/workers/mends/experts.py); under --spmd, one of each shape
of decoder layer."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import transformers
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

import tpu_nb

TEXTS = [f"the {animal} sat on the {place} ." for animal in ("cat", "dog", "owl", "fox") for place in ("mat", "hill", "tree", "pond")] * 4
SHARED = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1}
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {"head_dim": 8}),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", {"head_dim": 8}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 8}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {"pad_token_id": 0}),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", {"num_local_experts": 2, "num_experts_per_tok": 2}),
}


def tokenizer() -> Any:
    raw = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    raw.train_from_iterator(TEXTS, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[EOS]"]))
    return PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="[PAD]", unk_token="[UNK]", eos_token="[EOS]")


def family_models(vocabulary: int) -> dict[str, Any]:
    built = {}
    for name, (config_name, model_name, own) in FAMILIES.items():
        torch.manual_seed(0)
        config = getattr(transformers, config_name)(vocab_size=vocabulary, max_position_embeddings=32, **SHARED, **own)
        built[name] = getattr(transformers, model_name)(config)
    return built


def a_lora_step_each(models_by_family: dict[str, Any], tok: Any, train: Any) -> dict[str, tuple[float, bool]]:
    """In the worker: an unchanged SFTTrainer with TRL's defaults and LoRA on every linear layer, one step per family."""
    from peft import LoraConfig
    from trl import SFTConfig, SFTTrainer

    found = {}
    for name, model in models_by_family.items():
        args = SFTConfig(output_dir=f"/tmp/tpu_nb-families/{name}", max_steps=1, max_length=8, per_device_train_batch_size=8, report_to=[])
        trainer = SFTTrainer(
            model=model, args=args, train_dataset=train, processing_class=tok, peft_config=LoraConfig(r=2, target_modules="all-linear")
        )
        loss = trainer.train().training_loss
        moved = any(parameter.abs().sum().item() > 0 for key, parameter in trainer.model.named_parameters() if "lora_B" in key)
        found[name] = (loss, moved)
    return found


# Under --spmd what differs by family is FSDPv2's wrapping of its decoder layer; the mends each family needs are the
# same code as in a worker per device, where every family runs. Three shapes of layer stand for the rest under --spmd
# (each family costs about 10 CPU-seconds here, and make test has ten minutes): dense (Llama), Gemma 3's (its own
# head_dim, sliding-window layers), and mixture of experts (Mixtral).
UNDER_SPMD = ("llama", "gemma3", "mixtral")


@pytest.mark.parametrize(
    ("placement", "families"),
    [({}, tuple(FAMILIES)), ({"spmd": True, "cores": 4}, UNDER_SPMD)],
    ids=["a worker per device", "spmd"],
)
def test_every_family_takes_a_lora_step_with_trls_defaults(placement: dict[str, Any], families: tuple[str, ...]) -> None:
    tok = tokenizer()
    models_by_family = {name: model for name, model in family_models(len(tok)).items() if name in families}
    found = tpu_nb.launch(
        a_lora_step_each, models_by_family, tok, Dataset.from_dict({"text": TEXTS}), progress=False, timeout=900, **placement
    )
    assert list(found) == list(families)
    for name, (loss, moved) in found.items():
        assert 0 < loss < 10, (name, loss)
        assert moved, name  # the adapters' B matrices left zero: gradients reached them through checkpointing
