"""Loading the tokenizer and the model for a task, on the CPU, in the kernel."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import CAUSAL_LM, MASKED_LM, TEXT_CLASSIFICATION, TrainConfig
from .hub import hub_unreachable_reason
from .sources import looks_like_path

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

_POSITION_ATTRIBUTES = ("max_position_embeddings", "n_positions", "max_sequence_length", "n_ctx", "seq_length")
# These number positions from padding_idx + 1, so two of their embeddings are never usable (514 -> 512).
_OFFSET_POSITION_MODELS = frozenset({"roberta", "xlm-roberta", "camembert", "mpnet", "longformer", "data2vec-text"})


def hub_options(name: str) -> dict[str, Any]:
    """from_pretrained options: cache only when the Hub cannot be reached (instead of ~23 s of retries)."""
    if looks_like_path(name):
        return {}
    return {"local_files_only": hub_unreachable_reason() is not None}


def position_limit(model_config: PretrainedConfig) -> tuple[int | None, str]:
    """The longest input the model accepts, and the config attribute that says so."""
    for attribute in _POSITION_ATTRIBUTES:
        value = getattr(model_config, attribute, None)
        if isinstance(value, int) and value > 0:
            if getattr(model_config, "model_type", None) in _OFFSET_POSITION_MODELS:
                offset = (getattr(model_config, "pad_token_id", None) or 0) + 1
                return value - offset, f"{attribute} {value} minus {offset} for its position offset"
            return value, attribute
    return None, "unknown"


def load_tokenizer(config: TrainConfig) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(config.model, **hub_options(config.model))
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        # GPT-style tokenizers have no pad token; classification pads to max_length.
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(config: TrainConfig, tokenizer: PreTrainedTokenizerBase, labels: tuple[str, ...] = ()) -> PreTrainedModel:
    """The model with the head for `config.task`, in float32 on the CPU (a new head is initialised randomly)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSequenceClassification

    options: dict[str, Any] = {**hub_options(config.model), "dtype": torch.float32}
    model: PreTrainedModel
    # A new head starts from random weights: seed them, without resetting the notebook's own random state.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        if config.task == TEXT_CLASSIFICATION:
            model = AutoModelForSequenceClassification.from_pretrained(
                config.model,
                num_labels=len(labels),
                id2label=dict(enumerate(labels)),
                label2id={name: index for index, name in enumerate(labels)},
                **options,
            )
        elif config.task == MASKED_LM:
            model = AutoModelForMaskedLM.from_pretrained(config.model, **options)
        elif config.task == CAUSAL_LM:
            model = AutoModelForCausalLM.from_pretrained(config.model, **options)
        else:
            raise ValueError(f"unknown task {config.task!r}; validate() reports this before loading")
    if config.task == TEXT_CLASSIFICATION and model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id  # GPT-style models find each row's last token through it
    embedding_rows = getattr(model.get_input_embeddings(), "num_embeddings", None)
    if isinstance(embedding_rows, int) and len(tokenizer) > embedding_rows:
        model.resize_token_embeddings(len(tokenizer))  # as run_mlm/run_clm: the tokenizer grew
    return model
