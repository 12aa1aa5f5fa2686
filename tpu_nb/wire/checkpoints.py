"""A run's checkpoints on disk (or gs://): the format workers write and the kernel lists, in both directions.

    DIR/checkpoint-500/            one checkpoint, named by its step (a Trainer names its own so too)
        state.pt                     a hand-written loop's tracked state: model, optimizer, scheduler, RNG, step
        (a Trainer's own files)      model.safetensors (or adapter_model.safetensors), optimizer.pt, trainer_state.json, ...
        tpu_nb.json                  written last, once the checkpoint was read back and checked: what `CheckpointRecord` holds

A checkpoint without `tpu_nb.json`, or whose record says it failed its
check, never counts: resuming takes the newest verified one. A loop's
checkpoint is written as `checkpoint-500.partial/` and renamed once
verified, so a cut write never even looks like one. DIR is a local path
(a Drive mount, /kaggle/working) or any fsspec URL (gs://BUCKET/PATH).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from tpu_nb.basics.units import format_duration, parse_duration

RECORD = "tpu_nb.json"
LOOP_STATE = "state.pt"
PREFIX = "checkpoint-"
PARTIAL = ".partial"
_NAME = re.compile(rf"^{PREFIX}(\d+)$")


class CheckpointError(ValueError):
    """A checkpoint setting or directory that cannot be used as asked; the message says what to change."""


@dataclass(frozen=True, slots=True)
class Every:
    """How often a run saves: every `steps` steps or every `seconds` seconds (and always when it stops)."""

    steps: int | None = None
    seconds: float | None = None

    @classmethod
    def parse(cls, text: str) -> Every:
        """ "500steps", "500 steps", "15m", "90s", "2h" or "1h30m"."""
        cleaned = text.strip().lower().replace(" ", "")
        steps = re.fullmatch(r"(\d+)steps?", cleaned)
        if steps:
            if int(steps[1]) < 1:
                raise CheckpointError(f"--every {text}: give at least 1 step.")
            return cls(steps=int(steps[1]))
        return cls(seconds=parse_duration(text, "--every"))

    def __str__(self) -> str:
        return f"{self.steps} steps" if self.steps is not None else f"{format_duration(self.seconds or 0)}"


@dataclass(frozen=True, slots=True)
class CheckpointPlan:
    """What a run's workers do about checkpoints (from `--checkpoint`, `--every`, `--keep`, `--resume`)."""

    directory: str
    every: Every
    keep: int
    resume_from: str | None = None  # a checkpoint directory to start from (the newest verified one, chosen in the kernel)
    passed_over: tuple[str, ...] = ()  # newer checkpoints a resume did not trust, each with why (said on the dashboard)
    budget: int | None = None  # bytes all checkpoints may take: older verified ones go first (never the newest)


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """`tpu_nb.json`: what a checkpoint holds and what its check found."""

    step: int
    kind: str  # "loop" (tpu_nb.checkpoint.track) or "trainer"
    saved_at: str  # ISO time, UTC
    seconds: float  # from the step's end to the checkpoint written and checked
    stall_seconds: float  # how long the training step waited (the device-to-host copy)
    size: int  # bytes
    verified: bool
    problem: str | None  # why it failed its check
    loss: float | None
    history: list[tuple[int | None, dict[str, float]]]  # the metrics logged up to this step: the loss curve, continued on resume
    parameters: dict[str, list[int]]  # the model's parameter names and shapes: a resume with another model is refused
    world: dict[str, Any]  # world size and mesh of the run that saved it
    start_checksums: dict[str, str]  # each starting weight's checksum: a checkpoint that saved them again is caught
    files: dict[str, int]  # each file's size: a file cut or changed since is found before a resume trusts it
    # Each tensor file's checksums (by tensor in a safetensors file, by stored record in a torch one): a file changed with
    # its size intact is found when a resume reads it back. Empty in records written before they were kept.
    checksums: dict[str, dict[str, str]] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> CheckpointRecord:
        fields = json.loads(text)
        fields["history"] = [(step, dict(metrics)) for step, metrics in fields["history"]]
        return cls(**fields)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One checkpoint found in a directory."""

    path: str  # its directory (local path or URL)
    step: int
    record: CheckpointRecord | None  # None: no tpu_nb.json (cut short, or not written by tpu_nb)
    damage: str | None = None  # how its files differ from what its record says was written

    @property
    def verified(self) -> bool:
        return self.record is not None and self.record.verified and self.damage is None

    @property
    def state(self) -> str:
        if self.record is None:
            return "not verified (no tpu_nb.json: cut short, or not written by tpu_nb)"
        if not self.record.verified:
            return f"failed its check: {self.record.problem}"
        return "verified" if self.damage is None else f"damaged since it was saved: {self.damage}"


def checkpoint_name(step: int) -> str:
    return f"{PREFIX}{step}"


def list_checkpoints(directory: str) -> list[Checkpoint]:
    """Every checkpoint in `directory` (local or URL), by step; a missing directory has none."""
    import fsspec

    filesystem, root = fsspec.core.url_to_fs(directory)
    if not filesystem.exists(root):
        return []
    found = []
    for entry in filesystem.ls(root, detail=True):
        name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
        match = _NAME.match(name)
        if entry["type"] != "directory" or match is None:
            continue
        sizes = {
            file["name"].rstrip("/").rsplit("/", 1)[-1]: int(file.get("size") or 0)
            for file in filesystem.ls(entry["name"], detail=True)
            if file["type"] == "file"
        }
        record = None
        if RECORD in sizes:
            try:
                with filesystem.open(f"{entry['name'].rstrip('/')}/{RECORD}", "r") as file:
                    record = CheckpointRecord.from_json(file.read())
            except (ValueError, TypeError, KeyError):
                record = None  # unreadable: as good as none
        damage = None if record is None else file_damage(record.files, sizes)
        found.append(Checkpoint(_joined(directory, name), int(match[1]), record, damage))
    return sorted(found, key=lambda checkpoint: checkpoint.step)


def file_damage(written: dict[str, int], found: dict[str, int]) -> str | None:
    """How the files found differ from those written (a file missing, or cut or grown), or None."""
    for name, size in sorted(written.items()):
        if name not in found:
            return f"{name} is missing"
        if found[name] != size:
            return f"{name} is {found[name]:,} bytes, was {size:,} when saved"
    return None


def newest_verified(directory: str) -> Checkpoint | None:
    verified = [checkpoint for checkpoint in list_checkpoints(directory) if checkpoint.verified]
    return verified[-1] if verified else None


def _joined(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}"
