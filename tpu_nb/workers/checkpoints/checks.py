"""What a checkpoint holds, checked against what was trained (its checksums, the starting weights, a LoRA adapter), and
checked again before a resume (the checksums its record keeps, nothing in it that would run code).

Every check reads the files a tensor at a time (`checkpoint_contents`): a
model's weights need not fit in memory twice.
"""

from __future__ import annotations

import re
import zipfile
from collections import Counter
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpu_nb.workers.checkpoints.contents import (
    Allowing,
    FreedMemoryReturned,
    UnsafeCheckpoint,
    checksum,
    digest_of,
    file_checksums,
    load_safely,
    tensor_bytes,
    tensor_files,
)
from tpu_nb.workers.checkpoints.xla_seed import seed_kept


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


@dataclass(frozen=True, slots=True)
class Checked:
    """What a checkpoint's check found, and each tensor file's checksums, kept in its record for a resume to check again."""

    problem: str | None
    checksums: dict[str, dict[str, str]]


def numpy_arrays_allowed() -> AbstractContextManager[Any]:
    """What a resume lets `torch.load` take beyond tensors and plain values: NumPy arrays, which a Trainer's RNG file
    holds (and a loop checkpoint's NumPy RNG state from before tpu_nb wrote it as a list). transformers' own list,
    what its resume loads that file with: NumPy's `_reconstruct`, `ndarray` and dtypes, for one load."""
    from transformers.trainer_pt_utils import safe_globals

    allowing: AbstractContextManager[Any] = safe_globals()
    return allowing


def check_trainer_checkpoint(
    path: Path, trained: Mapping[str, str], start: Mapping[str, str] | None, allow: Allowing = numpy_arrays_allowed
) -> Checked:
    """What is wrong with the checkpoint a Trainer saved in `path`, against the trained model's checksums, read a tensor at a time."""
    sums: dict[str, dict[str, str]] = {}
    for name in tensor_files(path) if path.is_dir() else []:
        try:
            sums[name] = file_checksums(path / name)
        except (OSError, ValueError, zipfile.BadZipFile) as error:
            return Checked(f"{name} does not read back ({type(error).__name__}: {error})", sums)
    problem = _weights_problem(path, sums, trained, start) or _unloadable(path, sums, allow)
    return Checked(problem, sums)


def _weights_problem(
    path: Path, sums: Mapping[str, Mapping[str, str]], trained: Mapping[str, str], start: Mapping[str, str] | None
) -> str | None:
    saved = _saved_weights(path, sums)
    if saved is None:
        return f"no weights file in {path.name} (model.safetensors, pytorch_model.bin or adapter_model.safetensors)"
    adapter = "adapter_model.safetensors" in sums
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


def _saved_weights(path: Path, sums: Mapping[str, Mapping[str, str]]) -> dict[str, str] | None:
    """Each saved weight's checksum by name: an adapter's, or the model's over all its shards; None without a weights file."""
    for stem in ("adapter_model", "model"):
        shards = [name for name in sums if name == f"{stem}.safetensors" or re.fullmatch(rf"{stem}-\d+-of-\d+\.safetensors", name)]
        if shards:
            return {key: value for name in shards for key, value in sums[name].items()}
    if "pytorch_model.bin" in sums:
        return {key: checksum(tensor) for key, tensor in load_safely(path / "pytorch_model.bin", mapped=True).items()}
    return None


def _matching_key(key: str, expected: Mapping[str, Any]) -> str | None:
    """The model's own key for a saved one (PEFT saves adapters without the adapter's name: `.lora_A.weight`)."""
    if key in expected:
        return key
    for own in expected:
        if own.replace(".default", "") == key or own.endswith("." + key) or key.endswith("." + own):
            return own
    return None


def check_loop_checkpoint(path: Path, expected: Mapping[str, str], start: Mapping[str, str] | None, step: int) -> Checked:
    """What is wrong with a loop checkpoint just written, read back a record at a time: `expected` is each saved tensor's
    checksum by its place in the state ("objects/model/weight"), a tensor saved under several names under one of them;
    the state itself need not be in memory any more."""
    try:
        sums = file_checksums(path)
        saved = load_safely(path, mapped=True)  # its structure: none of its tensors is read
    except UnsafeCheckpoint as error:
        return Checked(f"it would not load on resume: {error}", {})
    except (OSError, ValueError, RuntimeError, EOFError, zipfile.BadZipFile) as error:
        return Checked(f"it does not reload ({type(error).__name__}: {error})", {})
    objects = {name.split("/")[1] for name in expected if name.startswith("objects/")}
    lacking = sorted(objects - set(saved.get("objects", {}) if isinstance(saved, dict) else {}))
    del saved
    if lacking:
        return Checked(f"`{lacking[0]}` is not in it: the write was damaged", {path.name: sums})
    stored = Counter(digest for record, digest in sums.items() if record.startswith("data/"))
    damaged = []
    for name, value in expected.items():
        if stored[digest_of(value)] > 0:
            stored[digest_of(value)] -= 1
        else:
            damaged.append(name)
    if damaged:
        more = f" and {len(damaged) - 1} more" if len(damaged) > 1 else ""
        return Checked(f"`{damaged[0]}`{more} read back other than saved: the write was damaged", {path.name: sums})
    prefix = "objects/model/"
    model = {name.removeprefix(prefix): value for name, value in expected.items() if name.startswith(prefix)}
    # `expected` names a tied tensor once, the starting checksums under each of its names.
    if model and start and step > 0 and all(start.get(name) == value for name, value in model.items()):
        return Checked("the model's weights equal the starting weights: it did not train, or another model was tracked", {path.name: sums})
    return Checked(None, {path.name: sums})


def content_damage(directory: Path, stored: Mapping[str, Mapping[str, str]], allow: Allowing | None) -> str | None:
    """Before a resume: how `directory`'s files differ from the checksums its record keeps, or what in them would not load safely."""
    for name, expected in sorted(stored.items()):
        try:
            found = file_checksums(directory / name)
        except FileNotFoundError:
            return f"{name} is missing"
        except (zipfile.BadZipFile, ValueError) as error:
            return f"{name} changed since it was saved ({error})"
        except OSError as error:
            return f"{name} cannot be read ({error})"
        differing = sorted(key for key in set(expected) | set(found) if expected.get(key) != found.get(key))
        if differing:
            listed = ", ".join(differing[:3]) + (", ..." if len(differing) > 3 else "")
            return f"{name} changed since it was saved ({len(differing)} of its tensors differ from the checksums in its record: {listed})"
    return _unloadable(directory, tensor_files(directory), allow)


def _unloadable(directory: Path, names: Iterable[str], allow: Allowing | None) -> str | None:
    """Why one of the torch files a resume loads would not load with weights_only=True, or None (their tensors are not read)."""
    for name in sorted(names):
        if name.endswith(".safetensors"):
            continue
        try:
            load_safely(directory / name, allow, mapped=True)
        except UnsafeCheckpoint as error:
            return str(error)
        except (OSError, RuntimeError, EOFError, ValueError) as error:
            return f"{name} does not load ({type(error).__name__}: {error})"
    return None


def model_checksums(model: Any) -> dict[str, str]:
    """Each weight's checksum, under the model's own names, copied to the host a tensor at a time (sharded ones gathered)."""
    from tpu_nb.workers.readings.read_back import unwrapped_key

    with seed_kept():
        return _checksums({unwrapped_key(key): tensor for key, tensor in model.state_dict().items()})


def saved_checksums(model: Any) -> dict[str, str]:
    """Each weight's checksum under the name `save_pretrained` saves it by, copied to the host a tensor at a time.

    transformers 5 converts some families' weights when it builds or loads them (Mixtral's and Qwen2-MoE's experts
    fused into one tensor), and `save_pretrained` converts them back: the expected layout is the model's state
    converted back by transformers' own `revert_weight_conversion`, as `save_pretrained` does it. Otherwise (a model
    that is not a transformers one, a PEFT adapter), the names of `model_checksums`.
    """
    from tpu_nb.workers.readings.read_back import unwrapped_key

    state = {unwrapped_key(key): tensor for key, tensor in model.state_dict().items()}
    with seed_kept():
        return _checksums(_as_saved(model, state))


def _checksums(state: Mapping[str, Any]) -> dict[str, str]:
    """Each tensor's checksum, copied to the host one at a time (the memory the copies took handed back as it goes)."""
    returned = FreedMemoryReturned(sum(tensor_bytes(tensor) for tensor in state.values()))
    sums = {}
    for key, tensor in state.items():
        sums[key] = checksum(tensor)
        returned.copied(tensor_bytes(tensor))
    return sums


def _as_saved(model: Any, state: dict[str, Any]) -> dict[str, Any]:
    import torch

    try:
        from transformers import PreTrainedModel
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:  # a transformers without weight conversions
        return state
    inner = model
    while not isinstance(inner, PreTrainedModel) and isinstance(getattr(inner, "module", None), torch.nn.Module):
        inner = inner.module  # a wrapper's (FSDPv2): the state's names are the inner model's already
    if not isinstance(inner, PreTrainedModel) or getattr(inner, "_hf_peft_config_loaded", False):
        return state  # PEFT saves its adapter unconverted
    converted: dict[str, Any] = revert_weight_conversion(inner, state)
    return converted


def parameter_shapes(model: Any) -> dict[str, list[int]]:
    from tpu_nb.workers.readings.read_back import unwrapped_key

    return {unwrapped_key(name): list(tensor.shape) for name, tensor in model.state_dict().items()}
