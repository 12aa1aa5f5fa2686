"""What a checkpoint holds, checked against what was trained: checksums, a reload, the starting weights, a LoRA adapter.

Every check reads tensors one at a time (a model's weights need not fit in
memory twice) and compares checksums of their bytes and shapes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .xla_seed import seed_kept


def parameter_difference(saved: Mapping[str, list[int]], current: Mapping[str, list[int]]) -> str | None:
    """How the model a checkpoint was saved from differs from this one (names, shapes), or None."""
    missing = sorted(set(saved) - set(current))
    extra = sorted(set(current) - set(saved))
    shapes = sorted(name for name in set(saved) & set(current) if list(saved[name]) != list(current[name]))
    said = []
    if missing:
        said.append(f"this model lacks {len(missing)} of its parameters ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})")
    if extra:
        said.append(f"this model has {len(extra)} it does not ({', '.join(extra[:3])}{', ...' if len(extra) > 3 else ''})")
    if shapes:
        name = shapes[0]
        said.append(f"{len(shapes)} have other shapes ({name}: {list(saved[name])} saved, {list(current[name])} here)")
    return "; ".join(said) + ": it was saved from another model" if said else None


def check_trainer_weights(path: Path, trained: Mapping[str, str], start: Mapping[str, str] | None) -> str | None:
    """What is wrong with the weights a Trainer saved in `path`, against the trained model's checksums, or None."""
    saved = saved_checksums(path)
    if saved is None:
        return f"no weights file in {path.name} (model.safetensors, pytorch_model.bin or adapter_model.safetensors)"
    adapter = (path / "adapter_model.safetensors").exists()
    what = "adapter" if adapter else "weights"
    expected = {key: checksum for key, checksum in trained.items() if not adapter or "lora_" in key}
    own_keys = {key: _matching_key(key, expected) for key in saved}
    unknown = sorted(key for key, own in own_keys.items() if own is None)
    if unknown:
        return f"its {what} hold {len(unknown)} keys this model does not load ({', '.join(unknown[:3])}): they would not reload onto it"
    if start and saved and all(start.get(own or "") == saved[key] for key, own in own_keys.items()):
        return f"its {what} equal the starting ones: it would reload as the model before training (transformers #36004)"
    differing = [key for key, own in own_keys.items() if saved[key] != expected[own or key]]
    if differing:
        return f"{len(differing)} saved tensors differ from the trained model's ({', '.join(differing[:3])}): the save did not keep the trained weights"
    return None


def saved_checksums(path: Path) -> dict[str, str] | None:
    """Each saved tensor's checksum, read a tensor at a time (a model's weights need not fit in memory twice)."""
    import torch

    for name in ("adapter_model.safetensors", "model.safetensors"):
        if (path / name).exists():
            from safetensors import safe_open

            with safe_open(str(path / name), framework="pt") as weights:
                return {key: checksum(weights.get_tensor(key)) for key in weights.keys()}
    if (path / "pytorch_model.bin").exists():
        return {
            key: checksum(tensor) for key, tensor in torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True).items()
        }
    return None


def _matching_key(key: str, expected: Mapping[str, Any]) -> str | None:
    """The model's own key for a saved one (PEFT saves adapters without the adapter's name: `.lora_A.weight`)."""
    if key in expected:
        return key
    for own in expected:
        if own.replace(".default", "") == key or own.endswith("." + key) or key.endswith("." + own):
            return own
    return None


def check_loop_checkpoint(path: Path, state: Mapping[str, Any], start: Mapping[str, str] | None) -> str | None:
    """What is wrong with a loop checkpoint just written, reloaded from disk, or None."""
    import torch

    try:
        reloaded = torch.load(path, map_location="cpu", weights_only=False)
    except (OSError, RuntimeError, EOFError, ValueError) as error:
        return f"it does not reload ({type(error).__name__}: {error})"
    for name, value in state["objects"].items():
        if fingerprint_of(reloaded["objects"].get(name)) != fingerprint_of(value):
            return f"`{name}` reloads other than it was saved: the write was damaged"
    model = state["objects"].get("model")
    if model is not None and start and state["step"] > 0 and {key: checksum(tensor) for key, tensor in model.items()} == dict(start):
        return "the model's weights equal the starting weights: it did not train, or another model was tracked"
    return None


def model_checksums(model: Any) -> dict[str, str]:
    """Each weight's checksum, under the model's own names, copied to the host a tensor at a time (sharded ones gathered)."""
    from .read_back import unwrapped_key

    with seed_kept():
        return {unwrapped_key(key): checksum(tensor) for key, tensor in model.state_dict().items()}


def parameter_shapes(model: Any) -> dict[str, list[int]]:
    from .read_back import unwrapped_key

    return {unwrapped_key(name): list(tensor.shape) for name, tensor in model.state_dict().items()}


def _tensors(value: Any) -> Iterator[Any]:
    """Every tensor in a (nested) state, in a fixed order."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        yield value
    elif isinstance(value, Mapping):
        for key in sorted(value, key=str):
            yield from _tensors(value[key])
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item)


def fingerprint_of(value: Any) -> str:
    """One checksum for every tensor in a (nested) state."""
    digest = hashlib.sha256()
    for tensor in _tensors(value):
        digest.update(checksum(tensor).encode())
    return digest.hexdigest()


def checksum(tensor: Any) -> str:
    contiguous = tensor.detach().cpu().contiguous()
    return hashlib.sha256(contiguous.view(-1).view(dtype=_byte_type()).numpy().tobytes()).hexdigest() + str(tuple(contiguous.shape))


def _byte_type() -> Any:
    import torch

    return torch.uint8
