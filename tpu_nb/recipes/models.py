"""Loading the tokenizer and the model for a task, on the CPU, in the kernel."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tpu_nb.recipes.config import CAUSAL_LM, MASKED_LM, TEXT_CLASSIFICATION, TrainConfig
from tpu_nb.recipes.hub import hub_unreachable_reason
from tpu_nb.recipes.memory import ModelSize
from tpu_nb.recipes.sources import looks_like_path

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


def model_size(model_config: PretrainedConfig) -> ModelSize | None:
    """Parameters and shape of the model this config builds, without memory: built on the meta device."""
    import torch
    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    try:
        # Looked up (and its module imported) before the meta device is on: that
        # import can reach torch._dynamo's first import, which torch 2.8 cannot
        # do under a device context (a circular import, measured on Kaggle's versions).
        model_class: Any = MODEL_MAPPING[type(model_config)]
        with torch.device("meta"):
            model = model_class(model_config)
    except (KeyError, ValueError, TypeError, RuntimeError, NotImplementedError):  # an architecture this cannot build
        return None
    text = model_config.get_text_config() if hasattr(model_config, "get_text_config") else model_config
    layers = getattr(text, "num_hidden_layers", None) or getattr(text, "n_layer", None)
    hidden = getattr(text, "hidden_size", None) or getattr(text, "n_embd", None)
    heads = getattr(text, "num_attention_heads", None) or getattr(text, "n_head", None)
    if not (isinstance(layers, int) and isinstance(hidden, int) and isinstance(heads, int)):
        return None
    return ModelSize(sum(parameter.numel() for parameter in model.parameters()), layers, hidden, heads)


def lora_targets_known(model_type: str | None) -> bool:
    """Whether peft picks LoRA's layers for this model type by itself (True when peft is not installed: not our call)."""
    try:
        from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
    except ImportError:
        return True
    return model_type in TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING


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
