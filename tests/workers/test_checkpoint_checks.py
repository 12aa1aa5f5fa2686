"""A checkpoint's weights checked against the trained model, the starting weights, and a LoRA adapter's model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tpu_nb.workers.checkpoint_checks import check_trainer_weights, model_checksums, parameter_difference


def test_a_trainers_checkpoint_is_checked_against_the_trained_model(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    start = model_checksums(model)
    trained = torch.nn.Linear(4, 1)
    save_file(dict(trained.state_dict()), str(tmp_path / "model.safetensors"))
    assert check_trainer_weights(tmp_path, model_checksums(trained), start) is None
    other = torch.nn.Linear(4, 1)
    assert "differ from the trained model's" in (check_trainer_weights(tmp_path, model_checksums(other), start) or "")
    save_file(dict(model.state_dict()), str(tmp_path / "model.safetensors"))  # transformers #36004: the base model saved
    problem = check_trainer_weights(tmp_path, model_checksums(trained), start)
    assert problem == "its weights equal the starting ones: it would reload as the model before training (transformers #36004)"
    assert "no weights file" in (check_trainer_weights(tmp_path / "missing", {}, start) or "")


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # peft 0.21 on transformers 5
def test_a_lora_adapter_is_checked_to_load_onto_its_base_model(tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import save_file
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    model = get_peft_model(BertModel(config), LoraConfig(r=4, target_modules=["query", "value"]))
    start = model_checksums(model)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.add_(0.5)  # what training does to an adapter
    model.save_pretrained(str(tmp_path / "trained"))
    assert check_trainer_weights(tmp_path / "trained", model_checksums(model), start) is None

    other = get_peft_model(BertModel(config), LoraConfig(r=4, target_modules=["key"]))  # an adapter for other layers
    other.save_pretrained(str(tmp_path / "other"))
    problem = check_trainer_weights(tmp_path / "other", model_checksums(model), start)
    assert problem is not None and problem.startswith("its adapter hold 2 keys this model does not load (base_model.model.encoder")

    untrained = tmp_path / "untrained"
    untrained.mkdir()
    saved = (tmp_path / "trained" / "adapter_model.safetensors").read_bytes()
    from safetensors.torch import load

    adapter = load(saved)
    save_file(
        {key: torch.zeros_like(tensor) if "lora_B" in key else tensor for key, tensor in adapter.items()},
        str(untrained / "adapter_model.safetensors"),
    )
    assert "adapter equal the starting ones" in (check_trainer_weights(untrained, model_checksums(model), start) or "")


def test_a_model_with_other_parameters_is_told_apart_by_name_and_shape() -> None:
    saved = {"encoder.weight": [8, 4], "encoder.bias": [8], "head.weight": [2, 8]}
    assert parameter_difference(saved, dict(saved)) is None
    difference = parameter_difference(saved, {"encoder.weight": [16, 4], "encoder.bias": [8], "classifier.weight": [2, 8]})
    assert difference == (
        "this model lacks 1 of its parameters (head.weight); this model has 1 it does not (classifier.weight); "
        "1 have other shapes (encoder.weight: [8, 4] saved, [16, 4] here): it was saved from another model"
    )
