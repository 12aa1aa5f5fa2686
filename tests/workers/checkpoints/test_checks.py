"""A checkpoint's weights checked against the trained model, the starting weights, and a LoRA adapter's model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.tiny_models import tiny_mixtral

from tpu_nb.workers.checkpoints.checks import check_trainer_checkpoint, model_checksums, parameter_difference


def check_trainer_weights(path: Path, trained: dict[str, str], start: dict[str, str]) -> str | None:
    return check_trainer_checkpoint(path, trained, start).problem


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


def test_a_trainers_files_are_checksummed_and_a_same_size_change_or_a_payload_is_found_before_a_resume(tmp_path: Path) -> None:
    import os

    import numpy
    from safetensors.torch import save_file

    from tpu_nb.workers.checkpoints.checks import content_damage, numpy_arrays_allowed

    torch.manual_seed(0)
    start = model_checksums(torch.nn.Linear(4, 1))
    trained = torch.nn.Linear(4, 1)
    save_file(dict(trained.state_dict()), str(tmp_path / "model.safetensors"))
    torch.save(torch.optim.AdamW(trained.parameters()).state_dict(), tmp_path / "optimizer.pt")
    torch.save(
        {"python": (3, (1, 2), None), "numpy": ("MT19937", numpy.arange(4, dtype=numpy.uint32), 0, 0, 0.0)}, tmp_path / "rng_state.pth"
    )
    checked = check_trainer_checkpoint(tmp_path, model_checksums(trained), start)
    assert checked.problem is None and sorted(checked.checksums) == ["model.safetensors", "optimizer.pt", "rng_state.pth"]
    assert checked.checksums["model.safetensors"] == model_checksums(trained)  # read from the file, a tensor at a time
    assert content_damage(tmp_path, checked.checksums, numpy_arrays_allowed) is None  # NumPy's state loads as transformers lets it

    weights = bytearray((tmp_path / "model.safetensors").read_bytes())
    position = weights.find(trained.weight.detach().numpy().tobytes())
    weights[position : position + 4] = bytes(byte ^ 0xFF for byte in weights[position : position + 4])
    (tmp_path / "model.safetensors").write_bytes(bytes(weights))  # the same size
    assert content_damage(tmp_path, checked.checksums, numpy_arrays_allowed) == (
        "model.safetensors changed since it was saved (1 of its tensors differ from the checksums in its record: weight)"
    )

    class Payload:
        def __reduce__(self) -> tuple[object, ...]:
            return (os.mkdir, (str(tmp_path / "ran"),))

    save_file(dict(trained.state_dict()), str(tmp_path / "model.safetensors"))
    torch.save({"python": Payload()}, tmp_path / "rng_state.pth")
    problem = content_damage(tmp_path, {"model.safetensors": checked.checksums["model.safetensors"]}, numpy_arrays_allowed)
    assert problem is not None and problem.startswith(f"{tmp_path.name}/rng_state.pth holds posix.mkdir, which is not a tensor")
    assert not (tmp_path / "ran").exists()


def test_a_checkpoint_saved_in_the_layout_save_pretrained_converts_to_is_checked_as_such(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    from tpu_nb.workers.checkpoints.checks import saved_checksums

    model = tiny_mixtral()
    start = saved_checksums(model)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.01)  # what training does
    model.save_pretrained(str(tmp_path), state_dict=model.state_dict())  # as a Trainer's save does it on XLA
    assert "model.layers.0.block_sparse_moe.experts.0.w1.weight" in load_file(str(tmp_path / "model.safetensors"))
    assert check_trainer_checkpoint(tmp_path, saved_checksums(model), start).problem is None

    saved = load_file(str(tmp_path / "model.safetensors"))
    saved["model.layers.0.block_sparse_moe.experts.1.w3.weight"] += 1  # one expert's weights other than trained
    save_file(saved, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    problem = check_trainer_checkpoint(tmp_path, saved_checksums(model), start).problem
    assert problem == (
        "1 saved tensors differ from the trained model's (model.layers.0.block_sparse_moe.experts.1.w3.weight): "
        "the save did not keep the trained weights"
    )
