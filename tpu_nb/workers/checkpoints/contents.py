"""What a checkpoint's files hold, read a tensor at a time, and loaded without running anything they hold.

Checksums are read straight from the files in chunks (constant memory,
nothing unpickled): a safetensors file's tensors from its header's offsets,
a torch file's (a zip archive: `state.pt`, `optimizer.pt`) from its records,
one per stored tensor plus its pickled structure. A torch file is loaded
only with `torch.load(weights_only=True)`: tensors and plain values, plus an
allow-list given for the call (a Trainer's RNG file holds NumPy arrays); a
file holding anything else (a class, a function: what would run code) is
refused with `UnsafeCheckpoint` naming it, and nothing in it runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import json
import os
import pickle
import re
import struct
import zipfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, Any

from tpu_nb.workers.readings.read_back import host_copy

TENSOR_FILES = (".safetensors", ".pt", ".pth", ".bin")
NEVER_LOADED = frozenset({"training_args.bin"})
"""A Trainer's pickled `TrainingArguments`: written for people to read, never loaded on resume (nor by tpu_nb)."""
CHUNK = 1 << 20
"""Bytes read at a time: a file is read back in no more memory than this."""

Allowing = Callable[[], AbstractContextManager[Any]]
"""Makes the allow-list one load may take beyond tensors and plain values (`torch.serialization.safe_globals(...)`)."""


class UnsafeCheckpoint(ValueError):
    """A checkpoint file holds more than tensors and plain values: it was not loaded. The message names it and what it holds."""


def tensor_files(directory: Path) -> list[str]:
    """The files of a checkpoint whose tensors are checksummed (and that a resume loads), by name."""
    return sorted(path.name for path in directory.iterdir() if path.suffix in TENSOR_FILES and path.name not in NEVER_LOADED)


def file_checksums(path: Path) -> dict[str, str]:
    """Each stored tensor's checksum in `path`, read in chunks: by name in a safetensors file (as `checksum` gives it), by
    record in a torch file (the digest of its bytes: a tensor's storage, or the pickled structure in `data.pkl`)."""
    if path.suffix == ".safetensors":
        return safetensors_checksums(path)
    with zipfile.ZipFile(path) as archive:  # torch.save writes a zip archive whose records are stored, not compressed
        sums = {}
        for info in archive.infolist():
            with archive.open(info) as record:  # read to its end, which checks the record's CRC-32 too
                sums[info.filename.split("/", 1)[-1]] = _digest(record, info.file_size)
        return sums


def safetensors_checksums(path: Path) -> dict[str, str]:
    """Each tensor's checksum in a safetensors file (digest of its bytes and its shape, as `checksum` gives for the tensor)."""
    with path.open("rb") as file:
        (length,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(length))
        start = 8 + length
        sums = {}
        entries = sorted((entry["data_offsets"], name, entry["shape"]) for name, entry in header.items() if name != "__metadata__")
        for (begin, end), name, shape in entries:
            file.seek(start + begin)
            sums[name] = _digest(file, end - begin) + str(tuple(shape))
        return sums


def _digest(file: IO[bytes], size: int) -> str:
    digest = hashlib.sha256()
    left = size
    while left:
        chunk = file.read(min(CHUNK, left))
        if not chunk:
            raise ValueError(f"it ends {left:,} bytes early")
        digest.update(chunk)
        left -= len(chunk)
    return digest.hexdigest()


def digest_of(checksum: str) -> str:
    """The digest part of a checksum (a tensor's also names its shape)."""
    return checksum[:64]


def load_safely(path: Path, allow: Allowing | None = None, mapped: bool = False) -> Any:
    """`path` loaded with `torch.load(weights_only=True)` (within `allow()`'s allow-list, for this load only, if given), or
    `UnsafeCheckpoint` if it holds more. `mapped` maps it from disk instead of reading it: nothing is read until a tensor is.
    """
    import torch

    try:
        with allow() if allow is not None else contextlib.nullcontext():
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mapped)
    except pickle.UnpicklingError as error:
        raise UnsafeCheckpoint(
            f"{path.parent.name}/{path.name} holds {_what_was_refused(error)}, which is not a tensor or a plain value: it was "
            "not loaded (a checkpoint runs no code: anyone who can write to the checkpoint directory could have put it there)"
        ) from None


def _what_was_refused(error: pickle.UnpicklingError) -> str:
    said = str(error)
    found = re.search(r"GLOBAL ([\w.]+)", said) or re.search(r"WeightsUnpickler error: ([^\n]+?)\.?\n", said)
    return found[1] if found else "something torch.load(weights_only=True) refuses"


def checksum(tensor: Any) -> str:
    """The digest of a tensor's bytes (on the host, contiguous) and its shape; a host tensor hashed where it lies,
    without a copy, a device's copied to the host first."""
    import torch

    detached = tensor.detach()
    contiguous = detached.contiguous() if detached.device.type == "cpu" else host_copy(detached)
    return hashlib.sha256(contiguous.view(-1).view(torch.uint8).numpy()).hexdigest() + str(tuple(contiguous.shape))


class FreedMemoryReturned:
    """Hands the memory that copies of tensors to the host freed back to the system when the copies so far hold more
    resident memory than their size (checked every 1/50 of `total` bytes copied, at least 8 MiB).

    A copy from an XLA device passes through a buffer of its own, which glibc keeps once freed: measured on XLA:CPU,
    copying a 151 MB state to the host took 285 MB more resident memory, and 134 MB when it was handed back after
    each tensor. `malloc_trim` takes about 20 ms there, so it runs only when the memory kept grows past the slack.
    """

    def __init__(self, total: int) -> None:
        self.every = max(8 << 20, total // 50)
        self.since = 0
        self.copied_bytes = 0
        self.started = _resident_bytes()

    def copied(self, size: int) -> None:
        self.since += size
        self.copied_bytes += size
        if self.since < self.every:
            return
        self.since = 0
        trim = _malloc_trim()
        if trim is not None and self.started is not None and (_resident_bytes() or 0) - self.started > self.copied_bytes + self.every:
            trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to hand back this way
        return None


def _resident_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):  # not Linux
        return None


def tensor_bytes(tensor: Any) -> int:
    return int(tensor.numel()) * int(tensor.element_size())


def distinct(named: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    """Each tensor object once, under the first of its names (a tied embedding is one tensor under two)."""
    seen: set[int] = set()
    for name, tensor in named:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            yield name, tensor


def unique_tensors(value: Any) -> list[Any]:
    """The tensors in a nested state, each object once."""
    return [tensor for _name, tensor in distinct(flat_tensors(value))]


def flat_tensors(value: Any, name: str = "") -> Iterator[tuple[str, Any]]:
    """Every tensor in a nested state with its path ("objects/optimizer/state/0/exp_avg"), in a fixed order."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        yield name, value
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            yield from flat_tensors(value[key], f"{name}/{key}" if name else str(key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from flat_tensors(item, f"{name}/{index}")
